package provision_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/state"
)

// TestReRunReplacesEarlierAttempt: a re-run (attempt 2) of a run whose first attempt was never
// released gives the old instances back first, so no stale runner holds the label.
func TestReRunReplacesEarlierAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	first := e.mustProvision("7701", 2)

	cfg := e.config("7701", 2)
	cfg.RunAttempt = 2
	second, err := e.provision(cfg)
	require.NoError(t, err)
	require.Len(t, second.Instances, 2)
	for id, it := range e.items(ids(second)) {
		require.Equal(t, 2, it.RunAttempt, id)
		require.Equal(t, state.Running, it.State)
	}
	for _, x := range first.Instances {
		it := e.items([]string{x.ID})[x.ID]
		if it.RunID == "7701" {
			require.Equal(t, 2, it.RunAttempt, "%s serves the run again only as attempt 2's", x.ID)
		}
	}
	runners := e.GH.Runners(localenv.Repo)
	require.Len(t, runners, 2, "only attempt 2's runners carry the label")
	e.release("7701")
	require.Empty(t, e.GH.Runners(""))
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
	registerStale(t, e, reg.GetToken(), "hangar-i-0123456789abcdef0-7000")

	e.mustProvision("7802", 1) // housekeeping runs alongside
	names := []string{}
	for _, r := range e.GH.Runners(localenv.Repo) {
		names = append(names, r.Name)
	}
	require.NotContains(t, names, "hangar-i-0123456789abcdef0-7000")
	require.Contains(t, names, "hangar-"+live.Instances[0].ID+"-7801")
}
