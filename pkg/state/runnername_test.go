package state

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRunnerName(t *testing.T) {
	name := RunnerName("i-0123456789abcdef0", "42")
	require.Equal(t, "hangar-i-0123456789abcdef0-42", name)
	id, run, ok := ParseRunnerName(name)
	require.True(t, ok)
	require.Equal(t, "i-0123456789abcdef0", id)
	require.Equal(t, "42", run)

	for _, bad := range []string{"", "hangar-", "runner-i-0123456789abcdef0-42", "hangar-i-0123456789abcdef0",
		"hangar-i-0123456789abcdef0-x", "hangar-i-XYZ-42", "hangar-i-0123456789abcdef0-042"} {
		_, _, ok := ParseRunnerName(bad)
		require.False(t, ok, bad)
	}
}
