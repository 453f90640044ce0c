package provision_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/faults"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
)

// TestReRunReplacesEarlierAttempt: a re-run (attempt 2) of a run whose first attempt was never
// released gives the old instances back to the pool first (idle, deregistered, offered), so that
// no stale runner holds the label; attempt 2 then claims from the pool like any run.
func TestReRunReplacesEarlierAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	first := e.mustProvision("7701", 2)

	cfg := e.config("7701", 1)
	cfg.RunAttempt = 2
	second, err := e.provision(cfg)
	require.NoError(t, err)
	require.Empty(t, second.Warnings)
	require.Len(t, second.Instances, 1)
	require.Equal(t, 1, second.Reused, "attempt 2 took one of attempt 1's instances from the pool")
	require.Contains(t, ids(first), second.Instances[0].ID)
	reused := second.Instances[0].ID
	it := e.items([]string{reused})[reused]
	require.Equal(t, state.Running, it.State)
	require.Equal(t, 2, it.RunAttempt)

	var left string
	for _, x := range first.Instances {
		if x.ID != reused {
			left = x.ID
		}
	}
	it = e.items([]string{left})[left]
	require.Equal(t, state.Idle, it.State, "the earlier attempt's other instance went back to the pool, not terminated")
	require.Equal(t, "7701", it.LastRunID)
	require.Empty(t, it.RunID)
	require.True(t, it.SignalFor(state.SignalDeregistered, "7701", 0), "its agent deregistered first")
	require.Equal(t, map[string]int{left: 1}, e.offered(), "and it is offered")
	st, err := e.InstanceState(e.ctx, left)
	require.NoError(t, err)
	require.Equal(t, "running", string(st))

	runners := e.GH.Runners(localenv.Repo)
	require.Len(t, runners, 1, "only attempt 2's runner carries the label")
	require.Equal(t, e.RunnerNames().Name(reused, "7701"), runners[0].Name)
	e.release("7701")
	require.Empty(t, e.GH.Runners(""))
}

// TestLostRegistrationWriteTerminatesNothing: an instance provision claimed registers, but
// another run takes it before provision can mark it running; provision replaces it and leaves
// it, alive, to the run that holds it.
func TestLostRegistrationWriteTerminatesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	warm := e.mustProvision("7901", 1).Instances[0].ID
	e.release("7901")

	deps, err := e.w.Provision(e.ctx, e.Pool)
	require.NoError(t, err)
	thief := &faults.Thief{Store: e.Store, Target: warm, Run: "7999", Before: state.Running}
	deps.Pool.Store = thief
	res, err := provision.Run(e.ctx, e.config("7902", 1), deps)
	require.NoError(t, err)
	stolen, err := thief.Stolen()
	require.NoError(t, err)
	require.True(t, stolen)
	require.Equal(t, 1, res.Replaced)
	require.NotEqual(t, warm, res.Instances[0].ID, "a fresh instance replaced the one taken")

	it := e.items([]string{warm})[warm]
	require.Equal(t, state.Claimed, it.State, "the other run keeps it")
	require.Equal(t, "7999", it.RunID)
	st, err := e.InstanceState(e.ctx, warm)
	require.NoError(t, err)
	require.Equal(t, "running", string(st), "a lost write never reaches TerminateInstances")
	e.release("7902")
}

// TestHousekeepingRemovesStaleRunners: an offline runner Hangar registered for an instance that
// no longer serves its run is deleted; one whose instance still serves its run is kept.
func TestHousekeepingRemovesStaleRunners(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	live := e.mustProvision("7801", 1) // its runner is online: kept
	reg, _, err := e.GitHub.Actions.CreateRegistrationToken(e.ctx, "octo", "app")
	require.NoError(t, err)
	// A stale registration: an instance that is gone left its runner behind, offline.
	registerStale(t, e, reg.GetToken(), e.RunnerNames().Name("i-0123456789abcdef0", "7000"))

	e.mustProvision("7802", 1) // housekeeping runs alongside
	names := []string{}
	for _, r := range e.GH.Runners(localenv.Repo) {
		names = append(names, r.Name)
	}
	require.NotContains(t, names, e.RunnerNames().Name("i-0123456789abcdef0", "7000"))
	require.Contains(t, names, e.RunnerNames().Name(live.Instances[0].ID, "7801"))
}
