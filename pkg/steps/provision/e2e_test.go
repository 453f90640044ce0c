package provision_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// The two tests here run end to end, on the emulators with real agents and runners: jobs queued
// with the run's label land on the runners provision made.

// TestColdThenWarm: a cold provision of 3 creates them with one CreateFleet; jobs land only on
// them; release gives them back; the next run's provision of 3 reuses all 3 without CreateFleet.
func TestColdThenWarm(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})

	cold := e.mustProvision("7001", 3)
	require.Equal(t, 0, cold.Reused)
	require.Equal(t, 3, cold.Created)
	require.Equal(t, []int32{3}, e.ec2.Fleets(), "one CreateFleet for the whole request")
	for id, it := range e.items(ids(cold)) {
		require.Equal(t, state.Running, it.State, id)
		require.Equal(t, "7001", it.RunID)
	}
	require.Len(t, e.GH.Runners(localenv.Repo), 3)

	other := e.GH.QueueJob(localenv.Repo, []string{"7999"}, "echo never")
	var jobs []int64
	for range 6 {
		jobs = append(jobs, e.GH.QueueJob(localenv.Repo, []string{"7001"}, "echo $RUNNER_NAME"))
	}
	ran := map[string]bool{}
	for _, j := range jobs {
		done, err := e.GH.WaitJob(e.ctx, j)
		require.NoError(t, err)
		require.Equal(t, "success", done.Conclusion)
		ran[done.RunnerName] = true
	}
	for name := range ran {
		require.Contains(t, []string{e.RunnerNames().Name(cold.Instances[0].ID, "7001"), e.RunnerNames().Name(cold.Instances[1].ID, "7001"),
			e.RunnerNames().Name(cold.Instances[2].ID, "7001")}, name, "jobs land only on the run's runners")
	}
	j, _ := e.GH.Job(other)
	require.Equal(t, "queued", j.Status)

	rel := e.release("7001")
	require.Len(t, rel.Instances, 3)
	for _, o := range rel.Instances {
		require.Equal(t, pool.Returned, o.Result, o.ID)
	}
	require.Empty(t, e.GH.Runners(""), "no runner of the run is left on GitHub")
	require.Empty(t, rel.Warnings)

	warm := e.mustProvision("7002", 3)
	require.Equal(t, 3, warm.Reused)
	require.Equal(t, 0, warm.Created)
	require.ElementsMatch(t, ids(cold), ids(warm), "the same machines serve the next run")
	require.Len(t, e.ec2.Fleets(), 1, "no CreateFleet for a warm provision")
	e.release("7002")
	require.Empty(t, e.GH.Runners(""))

	again := e.release("7002") // twice is harmless
	for _, o := range again.Instances {
		require.Equal(t, pool.Already, o.Result)
	}
}

// TestMixed: 2 pooled, 5 asked: 2 reused, 3 created.
func TestMixed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	e.mustProvision("7101", 2)
	e.release("7101")

	res := e.mustProvision("7102", 5)
	require.Equal(t, 2, res.Reused)
	require.Equal(t, 3, res.Created)
	require.Equal(t, []int32{2, 3}, e.ec2.Fleets(), "one CreateFleet per provision that lacked instances: 2, then the 3 the pool did not have")
	require.Len(t, e.GH.Runners(localenv.Repo), 5)
	e.release("7102")
	require.Empty(t, e.GH.Runners(""))
}
