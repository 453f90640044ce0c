package state

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRunnerNames(t *testing.T) {
	t.Parallel()
	const id, run = "i-0123456789abcdef0", "12345678901234567890"
	for _, stack := range []string{"prod", "ci-a", strings.Repeat("x", 63), "a-i"} {
		n := RunnerNamesOf(stack)
		name := n.Name(id, run)
		require.LessOrEqual(t, len(name), maxRunnerName, "%s: %s", stack, name)
		gotID, gotRun, ok := n.Parse(name)
		require.True(t, ok, name)
		require.Equal(t, id, gotID)
		require.Equal(t, run, gotRun)
		back, err := ParseRunnerPrefix(n.Prefix())
		require.NoError(t, err)
		require.Equal(t, n, back)
	}
	require.Equal(t, "hangar-prod-i-0123456789abcdef0-42", RunnerNamesOf("prod").Name(id, "42"))

	// Another stack's runners, and names Hangar never makes, are not this stack's.
	prod, a, ai := RunnerNamesOf("prod"), RunnerNamesOf("a"), RunnerNamesOf("a-i")
	for _, tc := range []struct {
		n    RunnerNames
		name string
	}{
		{prod, RunnerNamesOf("prod2").Name(id, "42")},
		{prod, RunnerNamesOf("staging").Name(id, "42")},
		{a, ai.Name(id, "42")},
		{ai, a.Name(id, "42")},
		{prod, "hangar-prod-i-0123456789abcdef0"},
		{prod, "hangar-prod-i-0123456789abcdef0-run"},
		{prod, "hangar-prod-web-1-42"},
		{prod, "my-runner"},
	} {
		_, _, ok := tc.n.Parse(tc.name)
		require.False(t, ok, "%s parsed by %s", tc.name, tc.n.Prefix())
	}
	for _, bad := range []string{"", "hangar-", "runner-prod-", "hangar-prod", "hangar-" + strings.Repeat("x", 17) + "-"} {
		_, err := ParseRunnerPrefix(bad)
		require.Error(t, err, bad)
	}
}
