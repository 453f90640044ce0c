package provision_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
	"github.com/hangar-ci/hangar/pkg/steps/release"
)

// TestClaimTakenBackByReleaseStopsProvision: a provision waits for the runner of the instance it
// claimed (its agent acknowledged the claim, but its runner is slow to register); the run's
// release gives the claim back. The provision stops at once, saying why, instead of waiting out
// its registration timeout.
func TestClaimTakenBackByReleaseStopsProvision(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	id := w.AddIdle(t, fake.Idle{Served: []string{fakeRepo}, LastRun: "7951"}).ID
	// The test plays the agent: it acknowledges the claim, and registers nothing.
	w.Agent.Behave(id, fake.Silent)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cfg := fakeConfig(w, "7952", 1) // registration-timeout: a minute
	type outcome struct {
		err error
		at  time.Time
	}
	provDone := make(chan outcome, 1)
	go func() {
		_, err := provision.Run(ctx, cfg, fakeDeps(t, w))
		provDone <- outcome{err, time.Now()}
	}()
	var claimed *state.Instance
	require.NoError(t, w.Store.Wait(ctx, func(items map[string]*state.Instance) bool {
		claimed = items[id]
		return claimed.State == state.Claimed && claimed.RunID == "7952"
	}))
	require.NoError(t, w.Store.AgentAck(id, claimed.Version, time.Now()))

	releaser, err := release.New(release.Config{DeregisterTimeout: 20 * time.Second, PollInterval: 10 * time.Millisecond},
		release.Deps{Pool: w.Pool, GitHub: w.GitHub, Runners: state.RunnerNamesOf(fake.Stack), Log: quiet})
	require.NoError(t, err)
	releaseStart := time.Now()
	type released struct {
		res *release.Result
		err error
	}
	relDone := make(chan released, 1)
	go func() {
		res, err := releaser.Release(ctx, "7952")
		relDone <- released{res, err}
	}()

	var got outcome
	select {
	case got = <-provDone:
	case <-ctx.Done():
		t.Fatal("provision still waiting after the release took its claim back")
	}
	require.Error(t, got.err)
	require.Contains(t, got.err.Error(), id+" is no longer held for run 7952")
	require.Contains(t, got.err.Error(), "a release of the run took it back")
	require.Less(t, got.at.Sub(releaseStart), cfg.RegistrationTimeout/4, "stopped at once, not at the registration timeout")

	// The agent now notices the release, and deregisters; the release offers the instance.
	w.Agent.Behave(id, fake.Register)
	rel := <-relDone
	require.NoError(t, rel.err)
	require.Len(t, rel.res.Instances, 1)
	require.Equal(t, pool.Returned, rel.res.Instances[0].Result, "%+v", rel.res.Instances[0])
	it := w.Store.Item(id)
	require.Equal(t, state.Idle, it.State)
	require.Empty(t, it.RunID)
	require.Equal(t, []string{id}, w.Offered(t))
}
