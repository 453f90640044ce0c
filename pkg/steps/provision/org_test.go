package provision_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestOrgScopeNeedsARunnerGroup: organisation runners join the pool's runner group, limited to
// the allowed repositories (GitHub then keeps another repository's jobs off them: the agent's
// tests show it, pkg/instance/agent's foreignjob_test.go); without a group, or with the Default
// group, org scope is refused before any request, and an input cannot move runners out of the
// pool's group.
func TestOrgScopeNeedsARunnerGroup(t *testing.T) {
	t.Parallel()
	refused := func(t *testing.T, w *fake.World, group, want string) {
		t.Helper()
		cfg := fakeConfig(w, "7921", 1)
		cfg.Scope, cfg.RunnerGroup = "org", group
		_, err := fakeRun(t, w, cfg)
		require.ErrorContains(t, err, want)
		require.Zero(t, w.GitHub.Calls("RegistrationToken"), "no token minted")
		require.Zero(t, w.GitHub.Calls("Runners"), "no GitHub call")
		require.Zero(t, w.EC2.Calls("CreateFleet"), "nothing launched")
		require.Zero(t, w.SQS.Calls("ReceiveMessage"), "nothing claimed")
		require.Empty(t, w.Store.Items())
	}

	w := fake.NewWorld(t, nil)
	refused(t, w, "", "runner-group: empty with runner-scope org")
	refused(t, w, "default", "the Default group is open to every repository")

	w = fake.NewWorld(t, fake.Pool(t, "linux", func(doc map[string]any) { doc["runnerGroup"] = "hangar-app" }))
	refused(t, w, "everyone", `puts its runners in group "hangar-app"`)

	cfg := fakeConfig(w, "7921", 1)
	cfg.Scope = "org"
	res, err := fakeRun(t, w, cfg)
	require.NoError(t, err)
	it := w.Store.Item(res.Instances[0].ID)
	require.Equal(t, "hangar-app", it.RunnerGroup, "the agent registers its runner in the pool's group")
	require.Equal(t, "https://github.com/octo", it.RunnerURL, "an organisation runner")
	require.Equal(t, []string{state.RunnerNamesOf(fake.Stack).Name(it.ID, "7921")}, w.GitHub.RunnerNames())

	rel := fakeRelease(t, w, "7921")
	require.Empty(t, rel.Warnings)
	require.Equal(t, 1, rel.RunnersDeleted)
	require.Empty(t, w.GitHub.RunnerNames())
}
