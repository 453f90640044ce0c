package release_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestReleaseRemovesLeftovers: provisions killed mid-way left this stack's runners registered,
// offline: one whose instance has no item, one whose instance is terminated, one whose instance
// was given back (idle, no run). The next release in the repository, of another run, deletes
// them; it keeps an offline runner whose instance still holds its run (claimed, its runner yet
// to come online), a busy one, a live run's online runner, and another stack's.
func TestReleaseRemovesLeftovers(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	names := state.RunnerNamesOf(fake.Stack)
	live := w.AddHeld(t, fake.Held{Run: "9601"}) // its runner online: kept

	gone := w.AddIdle(t, fake.Idle{})
	_, err := w.Store.Transition(context.Background(), state.Change{InstanceID: gone.ID, Pool: gone.Pool, From: gone.State,
		To: state.Terminated, Version: gone.Version, Reason: "expired"})
	require.NoError(t, err)
	given := w.AddIdle(t, fake.Idle{LastRun: "9602"})
	// Its agent has not noticed the claim yet: no runner of its own online.
	claimed := w.AddHeld(t, fake.Held{Run: "9603", Claimed: true, Unacked: true, Agent: fake.Silent})

	leftovers := []string{
		names.Name("i-0123456789abcdef0", "9602"), // no item
		names.Name(gone.ID, "9602"),               // terminated
		names.Name(given.ID, "9602"),              // idle: no longer holds the run
	}
	for _, n := range leftovers {
		w.GitHub.AddRunner(n, "offline", false)
	}
	kept := []string{
		names.Name(live.ID, "9601"),
		names.Name(claimed.ID, "9603"), // its instance still holds the run
		names.Name("i-0123456789abcdef1", "9604"),
		state.RunnerNamesOf("other-stack").Name("i-0123456789abcdef2", "9602"),
	}
	w.GitHub.AddRunner(kept[1], "offline", false)
	w.GitHub.AddRunner(kept[2], "offline", false)
	w.GitHub.SetBusy(kept[2], true)
	w.GitHub.AddRunner(kept[3], "offline", false)

	res := fakeRelease(t, w, "9605") // a run with no instances left
	require.Empty(t, res.Instances)
	require.Empty(t, res.Warnings)
	require.Equal(t, len(leftovers), res.LeftoversDeleted)
	require.Zero(t, res.RunnersDeleted, "the run had none")
	require.ElementsMatch(t, kept, w.GitHub.RunnerNames(), "only the leftovers are deleted")
	require.Equal(t, state.Claimed, w.Store.Item(claimed.ID).State, "the claim is not the release's")
}
