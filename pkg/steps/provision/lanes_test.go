package provision_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// runnerNames returns the names of the runners registered in the repository.
func (e *env) runnerNames() []string {
	var names []string
	for _, r := range e.GH.Runners(localenv.Repo) {
		names = append(names, r.Name)
	}
	return names
}

// TestRollbackLeavesTheOtherProvisionAlone: two provision jobs of one run on two pools; one
// fails and rolls back. The other's runner stays registered and its instance keeps serving.
func TestRollbackLeavesTheOtherProvisionAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	_, err := e.AddPool(e.ctx, "linux-big")
	require.NoError(t, err)
	good := e.mustProvision("7901", 1)
	kept := e.RunnerNames().Name(good.Instances[0].ID, "7901")
	require.Contains(t, e.runnerNames(), kept)

	// Every new registration of the stack is refused from now on: the second job fails.
	e.GH.RefuseRunners(e.RunnerNames().Prefix())
	cfg := e.config("7901", 1)
	cfg.Pool = "linux-big"
	_, err = e.provision(cfg)
	require.Error(t, err)

	require.Contains(t, e.runnerNames(), kept, "the rollback deleted only its own instances' runners")
	it := e.items([]string{good.Instances[0].ID})[good.Instances[0].ID]
	require.Equal(t, state.Running, it.State)
	require.Equal(t, "7901", it.RunID)
	e.release("7901")
	require.NotContains(t, e.runnerNames(), kept, "release removes every runner of the run")
}

// TestOtherStacksRunnersLeftAlone: another stack serving the same repository registered runners,
// one for the very run this stack releases (carrying that run's label), and left them offline.
// This stack's housekeeping and release touch neither; its own stale runner goes.
func TestOtherStacksRunnersLeftAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	reg, _, err := e.GitHub.Actions.CreateRegistrationToken(e.ctx, "octo", "app")
	require.NoError(t, err)
	other := state.RunnerNamesOf("other-stack")
	theirs := []string{other.Name("i-0123456789abcdef0", "7000"), other.Name("i-0123456789abcdef1", "7911")}
	ours := e.RunnerNames().Name("i-0123456789abcdef2", "7000")
	for _, name := range append(theirs, ours) {
		registerStale(t, e, reg.GetToken(), name)
	}

	e.mustProvision("7911", 1) // housekeeping runs alongside
	e.release("7911")
	names := e.runnerNames()
	for _, name := range theirs {
		require.Contains(t, names, name, "another stack's runner is not ours to delete")
	}
	require.NotContains(t, names, ours, "this stack's stale runner is deleted")
	for _, r := range e.GH.Runners(localenv.Repo) {
		if r.Name == theirs[1] {
			require.Contains(t, r.Labels, "7911", "it carries the released run's label, and is still not ours")
		}
	}
}
