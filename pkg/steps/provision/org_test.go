package provision_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/wire/step"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/platform/ghclient"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
	"github.com/hangar-ci/hangar/pkg/steps/release"
)

// TestOrgScopeNeedsARunnerGroup: organisation runners join the pool's runner group, limited to
// the allowed repositories, so another repository of the organisation cannot reach them even
// with the run's label; without a group, org scope is refused before any request.
func TestOrgScopeNeedsARunnerGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	org, err := ghclient.New(e.GH.URL(), localenv.AdminToken, ghapi.Scope{Owner: "octo"})
	require.NoError(t, err)
	wiring := func() *step.Wiring { // a fresh one: it caches the pool documents it reads
		w, err := e.Wiring(nil, nil)
		require.NoError(t, err)
		w.GitHub = org
		return w
	}
	w := wiring()
	cfg := e.config("7921", 1)
	cfg.Scope = "org"

	deps, err := w.Provision(e.ctx, cfg.Pool)
	require.NoError(t, err)
	before := e.GH.Registrations()
	_, err = provision.Run(e.ctx, cfg, deps)
	require.ErrorContains(t, err, "runner-group: empty with runner-scope org")
	require.Equal(t, before, e.GH.Registrations())
	require.Empty(t, e.liveInstances(), "refused before anything was launched")
	open := cfg
	open.RunnerGroup = "default"
	_, err = provision.Run(e.ctx, open, deps)
	require.ErrorContains(t, err, "the Default group is open to every repository")

	e.GH.SetGroup("hangar-app", localenv.Repo)
	require.NoError(t, e.UpdatePool(e.ctx, func(d *pooldoc.Document) { d.RunnerGroup = "hangar-app" }))
	w = wiring()
	deps, err = w.Provision(e.ctx, cfg.Pool)
	require.NoError(t, err)
	other := cfg
	other.RunnerGroup = "everyone"
	_, err = provision.Run(e.ctx, other, deps)
	require.ErrorContains(t, err, `puts its runners in group "hangar-app"`, "an input cannot move runners out of the pool's group")
	require.Empty(t, e.liveInstances())
	res, err := provision.Run(e.ctx, cfg, deps)
	require.NoError(t, err)
	runners := e.GH.Runners("octo")
	require.Len(t, runners, 1)
	require.Equal(t, "hangar-app", runners[0].Group)

	outside := e.GH.QueueJob("octo/other", []string{"7921"}, "echo outside")
	inside := e.GH.QueueJob(localenv.Repo, []string{"7921"}, "echo inside")
	done, err := e.GH.WaitJob(e.ctx, inside)
	require.NoError(t, err)
	require.Equal(t, e.RunnerNames().Name(res.Instances[0].ID, "7921"), done.RunnerName)
	j, _ := e.GH.Job(outside)
	require.Equal(t, "queued", j.Status, "the group keeps other repositories' jobs off the run's runner")

	releaser, _, err := w.Release(e.ctx, release.Config{DeregisterTimeout: 30 * time.Second})
	require.NoError(t, err)
	rel, err := releaser.Release(e.ctx, "7921")
	require.NoError(t, err)
	require.Empty(t, rel.Warnings)
	require.Empty(t, e.GH.Runners("octo"))
}
