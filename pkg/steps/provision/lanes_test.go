package provision_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
)

// addPool publishes another pool of the world's stack, as the stack's deployment would: its
// document in SSM, where the pool's directory reads it.
func addPool(t *testing.T, w *fake.World, name string) *pooldoc.Document {
	t.Helper()
	doc := fake.Pool(t, name, nil)
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	w.SSM.Put(pooldoc.ParameterName(fake.Stack, name), string(b))
	return doc
}

// TestRollbackLeavesTheOtherProvisionAlone: two provision jobs of one run on two pools; one
// fails and rolls back. The other's runner stays registered and its instance keeps serving.
func TestRollbackLeavesTheOtherProvisionAlone(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	// Every registration fails but that of the pooled instance the first job claims: the second
	// job, on another pool, fails. (Default is set before any item exists, so before the agent
	// reads it.)
	w.Agent.SetDefault(fake.FailRegister)
	pooled := w.AddIdle(t, fake.Idle{Served: []string{fakeRepo}, LastRun: "7900"})
	w.Agent.Behave(pooled.ID, fake.Register)
	big := addPool(t, w, "linux-big")
	good := mustRun(t, w, "7901", 1)
	require.Equal(t, pooled.ID, good.Instances[0].ID)
	kept := state.RunnerNamesOf(fake.Stack).Name(good.Instances[0].ID, "7901")
	require.Contains(t, w.GitHub.RunnerNames(), kept)

	cfg := fakeConfig(w, "7901", 1)
	cfg.Pool = big.Name
	deps := fakeDeps(t, w)
	deps.Doc = big
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := provision.Run(ctx, cfg, deps)
	require.ErrorContains(t, err, "failed to become ready")

	require.Contains(t, w.GitHub.RunnerNames(), kept, "the rollback deleted only its own instances' runners")
	it := w.Store.Item(good.Instances[0].ID)
	require.Equal(t, state.Running, it.State)
	require.Equal(t, "7901", it.RunID)
	requireHeld(t, w, "7901", good.Instances[0].ID)
	for id, in := range w.Store.Items() {
		if in.Pool == big.Name {
			require.Equal(t, state.Terminated, in.State, "%s: what the failed job created is terminated", id)
			require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(id))
		}
	}

	fakeRelease(t, w, "7901")
	require.NotContains(t, w.GitHub.RunnerNames(), kept, "release removes every runner of the run")
}

// TestOtherStacksRunnersLeftAlone: another stack serving the same repository registered runners,
// one for the very run this stack releases (carrying that run's label), and left them offline.
// This stack's housekeeping and release touch neither; its own stale runner goes.
func TestOtherStacksRunnersLeftAlone(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	other := state.RunnerNamesOf("other-stack")
	theirs := []string{other.Name("i-0123456789abcdef0", "7000"), other.Name("i-0123456789abcdef1", "7911")}
	ours := state.RunnerNamesOf(fake.Stack).Name("i-0123456789abcdef2", "7000")
	for _, name := range append(theirs, ours) {
		registerStale(t, w, name)
	}

	mustRun(t, w, "7911", 1) // housekeeping runs alongside
	fakeRelease(t, w, "7911")
	names := w.GitHub.RunnerNames()
	for _, name := range theirs {
		require.Contains(t, names, name, "another stack's runner is not ours to delete")
	}
	require.NotContains(t, names, ours, "this stack's stale runner is deleted")
	runners, err := w.GitHub.Runners(context.Background())
	require.NoError(t, err)
	for _, r := range runners {
		if r.Name == theirs[1] {
			require.Contains(t, r.Labels, "7911", "it carries the released run's label, and is still not ours")
		}
	}
	require.ElementsMatch(t, theirs, names, "nothing else is left")
}

// registerStale registers a runner named name and leaves it offline, as a runner whose instance
// is gone leaves it. Like every Hangar runner it carries its run's id (the name's last part) as
// a label.
func registerStale(t *testing.T, w *fake.World, name string) {
	t.Helper()
	run := name[strings.LastIndex(name, "-")+1:]
	_, err := w.GitHub.GenerateJITConfig(context.Background(), ghapi.JITRequest{Name: name, Labels: []string{run}})
	require.NoError(t, err)
}
