package pool_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestRemoveLeftovers: of the scope's runners, only the stack's offline, idle ones whose instance
// no longer serves their run are deleted (the caller's own run's are left to it).
func TestRemoveLeftovers(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	names := state.RunnerNamesOf(fake.Stack)
	serving := w.AddHeld(t, fake.Held{Run: "500"})
	given := w.AddIdle(t, fake.Idle{LastRun: "400"})
	w.GitHub.Reset() // AddHeld registered the serving instance's runner online
	keep := map[string]string{
		"serving its run, offline":      names.Name(serving.ID, "500"),
		"another stack's":               state.RunnerNamesOf("other").Name(given.ID, "400"),
		"not Hangar's":                  "build-box-7",
		"the caller's own run's":        names.Name("i-0000000000000c0de", "600"),
		"online (registering just now)": names.Name("i-0000000000000beef", "401"),
		"busy":                          names.Name("i-0000000000000feed", "402"),
		// Just-in-time runners are minted before their claim or their new instance's item is
		// written: the items cannot tell them from leftovers, so no sweep touches them.
		"a job's runner minted for an idle instance":             names.Name(given.ID, "j7001"),
		"a job's runner minted for an instance not yet recorded": names.Name("i-0000000000000b0b0", "j7002"),
		"a job's runner whose claim another job won":             names.Name(serving.ID, "j7003r1"),
	}
	for what, name := range keep {
		status, busy := "offline", false
		switch what {
		case "online (registering just now)":
			status = "online"
		case "busy":
			busy = true
		}
		w.GitHub.AddRunner(name, status, busy)
	}
	leftovers := []string{names.Name(given.ID, "400"), names.Name("i-00000000000000a11", "300"), names.Name("i-00000000000000a12", "301")}
	for _, name := range leftovers {
		w.GitHub.AddRunner(name, "offline", false)
	}

	n, warnings := w.Pool.RemoveLeftovers(ctx(t), w.GitHub, names, "600")
	require.Empty(t, warnings)
	require.Equal(t, 3, n)
	remaining := w.GitHub.RunnerNames()
	for what, name := range keep {
		require.Contains(t, remaining, name, what)
	}
	require.Len(t, remaining, len(keep), "the leftovers are gone")
}

// TestRemoveLeftoversReportsFailures: a runner GitHub refuses to delete is a warning, not an
// error, and the other leftovers are deleted all the same.
func TestRemoveLeftoversReportsFailures(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	names := state.RunnerNamesOf(fake.Stack)
	w.GitHub.AddRunner(names.Name("i-00000000000000a11", "300"), "offline", false)
	w.GitHub.AddRunner(names.Name("i-00000000000000a12", "301"), "offline", false)
	w.GitHub.Inject("DeleteRunner", fake.GitHubError(http.StatusForbidden, "Resource not accessible by integration"))

	n, warnings := w.Pool.RemoveLeftovers(ctx(t), w.GitHub, names, "")
	require.Equal(t, 1, n)
	require.Len(t, warnings, 1)
	require.Contains(t, warnings[0], "403")
	require.Len(t, w.GitHub.RunnerNames(), 1)
}
