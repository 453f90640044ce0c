package provision_test

import (
	"strings"
	"testing"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestReRunReplacesEarlierAttempt: a re-run (attempt 2) of a run whose first attempt was never
// released gives the old instances back to the pool first (idle, deregistered, offered), so that
// no stale runner holds the label; attempt 2 then claims from the pool like any run.
func TestReRunReplacesEarlierAttempt(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	names := state.RunnerNamesOf(fake.Stack)
	first := mustRun(t, w, "7701", 2)
	require.Len(t, w.GitHub.RunnerNames(), 2)

	cfg := fakeConfig(w, "7701", 1)
	cfg.RunAttempt = 2
	second, err := fakeRun(t, w, cfg)
	require.NoError(t, err)
	require.Empty(t, second.Warnings)
	require.Len(t, second.Instances, 1)
	require.Equal(t, 1, second.Reused, "attempt 2 took one of attempt 1's instances from the pool")
	require.Contains(t, resultIDs(first), second.Instances[0].ID)
	reused := second.Instances[0].ID
	it := w.Store.Item(reused)
	require.Equal(t, state.Running, it.State)
	require.Equal(t, 2, it.RunAttempt)
	requireHeld(t, w, "7701", reused)

	var left string
	for _, x := range first.Instances {
		if x.ID != reused {
			left = x.ID
		}
	}
	it = w.Store.Item(left)
	require.Equal(t, state.Idle, it.State, "the earlier attempt's other instance went back to the pool, not terminated")
	require.Equal(t, "7701", it.LastRunID)
	require.Empty(t, it.RunID)
	require.True(t, it.SignalFor(state.SignalDeregistered, "7701", 0), "its agent deregistered first")
	require.Equal(t, []string{left}, w.Offered(t), "and it is offered")
	require.Equal(t, ec2types.InstanceStateNameRunning, w.EC2.State(left))

	require.Equal(t, []string{names.Name(reused, "7701")}, w.GitHub.RunnerNames(), "only attempt 2's runner carries the label")
	fakeRelease(t, w, "7701")
	require.Empty(t, w.GitHub.RunnerNames())
}

// TestLostRegistrationWriteTerminatesNothing: provision's write that marks the instance it
// claimed running loses: another run took it just before (a release of this run and a claim of
// the other between provision's read and its write). Provision replaces it and leaves it, alive,
// to the run that holds it.
func TestLostRegistrationWriteTerminatesNothing(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	warm := w.AddIdle(t, fake.Idle{Served: []string{fakeRepo}, LastRun: "7901"}).ID
	w.Store.StealBefore(warm, "7999", state.Running)

	res := mustRun(t, w, "7902", 1)
	require.True(t, w.Store.Stolen(warm))
	require.Equal(t, 1, res.Replaced)
	require.Equal(t, 1, res.Created)
	require.NotEqual(t, warm, res.Instances[0].ID, "a fresh instance replaced the one taken")
	require.Contains(t, strings.Join(res.Warnings, "\n"), warm+" could not be marked running")
	requireHeld(t, w, "7902", res.Instances[0].ID)

	it := w.Store.Item(warm)
	require.Equal(t, state.Claimed, it.State, "the other run keeps it")
	require.Equal(t, "7999", it.RunID)
	require.Equal(t, ec2types.InstanceStateNameRunning, w.EC2.State(warm))
	require.Zero(t, w.EC2.Calls("TerminateInstances"), "a lost write never reaches TerminateInstances")
	fakeRelease(t, w, "7902")
	require.Equal(t, "7999", w.Store.Item(warm).RunID, "the release of 7902 leaves it alone too")
}

// TestHousekeepingRemovesStaleRunners: an offline runner Hangar registered for an instance that
// no longer serves its run is deleted; one whose instance still serves its run is kept.
func TestHousekeepingRemovesStaleRunners(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	names := state.RunnerNamesOf(fake.Stack)
	live := mustRun(t, w, "7801", 1) // its runner is online: kept
	// A stale registration: an instance that is gone left its runner behind, offline.
	stale := names.Name("i-0123456789abcdef0", "7000")
	registerStale(t, w, stale)

	next := mustRun(t, w, "7802", 1) // housekeeping runs alongside
	require.Empty(t, next.Warnings)
	require.ElementsMatch(t, []string{names.Name(live.Instances[0].ID, "7801"), names.Name(next.Instances[0].ID, "7802")},
		w.GitHub.RunnerNames(), "the stale runner is gone; the live ones stay")
}
