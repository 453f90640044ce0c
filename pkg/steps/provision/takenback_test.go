package provision_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
	"github.com/hangar-ci/hangar/pkg/steps/release"
)

// TestClaimTakenBackByReleaseStopsProvision: a provision waits for the runner of the instance it
// claimed (GitHub holds the registration); the run's release gives the claim back. The provision
// stops at once, saying why, instead of waiting out its registration timeout.
func TestClaimTakenBackByReleaseStopsProvision(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	warm := e.mustProvision("7951", 1)
	e.release("7951") // the instance is idle and offered
	id := warm.Instances[0].ID

	held := e.GH.Hold("/_fake/register") // the next registration waits
	t.Cleanup(held)
	cfg := e.config("7952", 1)
	cfg.RegistrationTimeout = 3 * time.Minute
	deps, err := e.w.Provision(e.ctx, cfg.Pool)
	require.NoError(t, err)
	type outcome struct {
		err error
		at  time.Time
	}
	provDone := make(chan outcome, 1)
	go func() {
		_, err := provision.Run(e.ctx, cfg, deps)
		provDone <- outcome{err, time.Now()}
	}()
	_, err = e.WaitItem(e.ctx, id, 2*time.Minute, "the claim for 7952 acknowledged", func(in *state.Instance) bool {
		return in.State == state.Claimed && in.RunID == "7952" && in.AckVersion >= in.Version
	})
	require.NoError(t, err)

	releaser, _, err := e.w.Release(e.ctx, release.Config{DeregisterTimeout: 20 * time.Second})
	require.NoError(t, err)
	releaseStart := time.Now()
	relDone := make(chan error, 1)
	go func() {
		_, err := releaser.Release(e.ctx, "7952")
		relDone <- err
	}()

	var got outcome
	select {
	case got = <-provDone:
	case <-time.After(2 * time.Minute):
		t.Fatal("provision still waiting 2 minutes after the release took its claim back")
	}
	held()
	require.Error(t, got.err)
	require.Contains(t, got.err.Error(), id+" is no longer held for run 7952")
	require.Contains(t, got.err.Error(), "a release of the run took it back")
	require.Less(t, got.at.Sub(releaseStart), 45*time.Second, "stopped at once, not at the registration timeout")
	require.NoError(t, <-relDone)
}
