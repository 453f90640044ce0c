package provision_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/platform/ghclient"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
)

// TestReuseScope: an instance that served a run of repository A is given to a run of another
// repository only as far as the pool's reuse scope allows; an instance that cannot be given
// stays idle and offered for runs that may have it.
func TestReuseScope(t *testing.T) {
	t.Parallel()
	const sameOwner, otherOwner = "octo/other", "acme/app" // localenv.Repo is octo/app
	tests := []struct {
		reuse  state.Reuse
		next   string // the repository of the second run
		reuse2 bool   // whether the second run gets the first run's instance
	}{
		{state.ReuseRepository, sameOwner, false},
		{state.ReuseRepository, localenv.Repo, true},
		{state.ReuseOwner, sameOwner, true},
		{state.ReuseOwner, otherOwner, false},
		{state.ReuseAny, otherOwner, true},
	}
	for _, tc := range tests {
		t.Run(string(tc.reuse)+" then "+tc.next, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, localenv.Options{})
			require.NoError(t, e.UpdatePool(e.ctx, func(d *pooldoc.Document) { d.Reuse = tc.reuse }))
			first := e.mustProvision("7701", 1)
			e.release("7701")
			used := first.Instances[0].ID
			it := e.items([]string{used})[used]
			require.Equal(t, state.Idle, it.State)
			require.Equal(t, []string{localenv.Repo}, it.ServedRepos)

			cfg := e.config("7702", 1)
			cfg.Repository = tc.next
			deps, err := e.w.Provision(e.ctx, cfg.Pool)
			require.NoError(t, err)
			owner, name, _ := strings.Cut(tc.next, "/")
			deps.GitHub, err = ghclient.New(e.GH.URL(), localenv.AdminToken, ghapi.Scope{Owner: owner, Repo: name})
			require.NoError(t, err)
			res, err := provision.Run(e.ctx, cfg, deps)
			require.NoError(t, err)
			if tc.reuse2 {
				require.Equal(t, 1, res.Reused)
				require.Equal(t, used, res.Instances[0].ID, "the instance A used serves the next run")
			} else {
				require.Equal(t, 1, res.Created, "a fresh instance for the other repository")
				require.NotEqual(t, used, res.Instances[0].ID)
				it := e.items([]string{used})[used]
				require.Equal(t, state.Idle, it.State, "A's instance is left alone")
				require.Equal(t, 1, e.offered()[used], "and still offered, to A's runs")
			}
			e.release("7702")
		})
	}
}

// TestReuseNever: a pool whose reuse is never terminates each instance when its run releases it,
// after its runner is deregistered.
func TestReuseNever(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	require.NoError(t, e.UpdatePool(e.ctx, func(d *pooldoc.Document) { d.Reuse = state.ReuseNever }))
	res := e.mustProvision("7711", 2)
	rel := e.release("7711")
	require.Len(t, rel.Instances, 2)
	for _, o := range rel.Instances {
		require.Equal(t, pool.Terminated, o.Result, "%+v", o)
	}
	offered := e.offered()
	for _, id := range ids(res) {
		it := e.items([]string{id})[id]
		require.Equal(t, state.Terminated, it.State)
		require.Contains(t, it.StateReason, "reuse is never")
		require.Zero(t, offered[id])
	}
	require.Empty(t, e.GH.Runners(""), "runners deregistered")
}
