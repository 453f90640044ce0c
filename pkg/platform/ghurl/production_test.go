//go:build !localworld

package ghurl

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBuildIsProduction: built without the localworld tag, as releases are, the exported checks
// refuse plain http, a loopback address included.
func TestBuildIsProduction(t *testing.T) {
	t.Parallel()
	require.False(t, LocalWorld)
	require.ErrorContains(t, CheckURL("http://127.0.0.1:8080"), "want an https URL")
	require.ErrorContains(t, CheckServer("http://127.0.0.1:8080"), "want an https URL")
	require.NoError(t, CheckURL("https://127.0.0.1:8443"))
}
