//go:build localworld

package ghurl

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBuildIsLocalWorld: built with -tags localworld (as the Makefile's tests are), the exported
// checks accept the plain-http loopback stand-in.
func TestBuildIsLocalWorld(t *testing.T) {
	t.Parallel()
	require.True(t, LocalWorld)
	require.NoError(t, CheckURL("http://127.0.0.1:8080"))
	require.NoError(t, CheckServer("http://127.0.0.1:8080"))
	require.Error(t, CheckURL("http://github.com"))
}
