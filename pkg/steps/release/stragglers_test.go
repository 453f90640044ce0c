package release_test

import (
	"context"
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// assignedAgo sets when run's instance was assigned to it (as its claim records it).
func assignedAgo(w *fake.World, in *state.Instance, d time.Duration) *state.Instance {
	it := *w.Store.Item(in.ID)
	it.AssignedAt = time.Now().Add(-d)
	w.Store.Put(it)
	return w.Store.Item(in.ID)
}

// TestStragglerTerminated: an agent that cannot see the release does not deregister; its
// instance is terminated when the deadline passes and its runner is deleted through the API.
func TestStragglerTerminated(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	good := assignedAgo(w, w.AddHeld(t, fake.Held{Run: "9001"}), time.Minute)
	stuck := assignedAgo(w, w.AddHeld(t, fake.Held{Run: "9001", Agent: fake.Silent}), time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Each instance's service to the run ends at its give-back (idle, the run cleared, saying
	// why), the stuck one's too, terminated only after: watch the items go by.
	givenBack := map[string]bool{}
	watch, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		_ = w.Store.Wait(watch, func(items map[string]*state.Instance) bool {
			for _, id := range []string{good.ID, stuck.ID} {
				if it := items[id]; it.State == state.Idle && it.RunID == "" && it.LastRunID == "9001" && it.StateReason == "released by run 9001" {
					givenBack[id] = true
				}
			}
			return false
		})
	}()
	res, err := fakeReleaser(t, w, time.Second).Release(ctx, "9001")
	stopWatch()
	<-watched
	require.NoError(t, err)
	require.Equal(t, map[string]bool{good.ID: true, stuck.ID: true}, givenBack, "both were given back: the run ended there")

	o := fake.RequireOutcome(t, res.Instances, good.ID, pool.Returned)
	require.InDelta(t, time.Minute.Seconds(), o.HeldSeconds, 30, "how long the run held it")
	require.False(t, o.PriceKnown, "launched without a price: unknown, not guessed")
	require.Zero(t, o.Cost)
	o = fake.RequireOutcome(t, res.Instances, stuck.ID, pool.Terminated)
	require.Contains(t, o.Reason, "did not deregister within 1s")
	require.Equal(t, 2, res.RunnersDeleted, "both runners are deleted through the API, the stuck instance's too")
	require.Empty(t, w.GitHub.RunnerNames())

	it := w.Store.Item(stuck.ID)
	require.Equal(t, state.Terminated, it.State)
	require.Contains(t, it.StateReason, "did not deregister within 1s")
	require.Equal(t, "9001", it.LastRunID, "its item, kept as history, says which run it served last")
	require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(stuck.ID))
	require.Equal(t, state.Idle, w.Store.Item(good.ID).State)
	require.Equal(t, []string{good.ID}, w.Offered(t))
}

// TestInstanceAlreadyGone: an instance refresh already terminated is skipped; a stray runner
// with the run's label is removed; release succeeds without warnings.
func TestInstanceAlreadyGone(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	in := w.AddHeld(t, fake.Held{Run: "9101"})
	_, err := w.Store.Transition(context.Background(), state.Change{InstanceID: in.ID, Pool: in.Pool, From: state.Running, To: state.Terminated,
		Version: in.Version, RunID: "9101", Reason: "expired"})
	require.NoError(t, err)
	require.Len(t, w.GitHub.RunnerNames(), 1, "its runner is left registered")

	res := fakeRelease(t, w, "9101")
	require.Empty(t, res.Instances, "a terminated instance no longer holds the run")
	require.Equal(t, 1, res.RunnersDeleted, "its runner, left registered, is removed")
	require.Empty(t, w.GitHub.RunnerNames())
	require.Empty(t, res.Warnings)
	require.Zero(t, w.EC2.Calls("TerminateInstances"), "nothing to terminate")
}

// TestStragglerTakenMeanwhileIsNotTerminated: a straggler that never deregisters is taken by
// another run between release's read and its write; release's write loses and the instance is
// left to the run that holds it, not terminated.
func TestStragglerTakenMeanwhileIsNotTerminated(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	stuck := w.AddHeld(t, fake.Held{Run: "9201", Agent: fake.Silent})
	w.Store.StealBefore(stuck.ID, "9299", state.Terminated)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := fakeReleaser(t, w, time.Second).Release(ctx, "9201")
	require.NoError(t, err)

	require.True(t, w.Store.Stolen(stuck.ID))
	require.Len(t, res.Instances, 1)
	require.Equal(t, pool.Already, res.Instances[0].Result, "the instance is the other run's now")
	it := w.Store.Item(stuck.ID)
	require.Equal(t, state.Claimed, it.State)
	require.Equal(t, "9299", it.RunID)
	require.Equal(t, ec2types.InstanceStateNameRunning, w.EC2.State(stuck.ID))
	require.Zero(t, w.EC2.Calls("TerminateInstances"), "a lost write never reaches TerminateInstances")
	require.Empty(t, w.Offered(t))
}

// TestCleaningFailureTerminates: an agent that cannot clean up after the run signals FAILED
// instead of DEREGISTERED (pkg/instance/agent: cleaningFailed); release terminates the instance
// instead of offering it.
func TestCleaningFailureTerminates(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	// The test plays the agent: once the run gives the instance back, its cleaning fails.
	in := w.AddHeld(t, fake.Held{Run: "9401", Agent: fake.Silent})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const failure = "hangar-agent: cleaning up after run 9401 failed: remove /tmp/x: not a directory"
	signalled := make(chan error, 1)
	go func() {
		var back *state.Instance
		if err := w.Store.Wait(ctx, func(items map[string]*state.Instance) bool {
			back = items[in.ID]
			return back.State == state.Idle && back.LastRunID == "9401"
		}); err != nil {
			signalled <- err
			return
		}
		signalled <- w.Store.AgentSignal(in.ID, state.Signal{Name: state.SignalFailed, Version: back.Version, Log: failure})
	}()

	res, err := fakeReleaser(t, w, time.Minute).Release(ctx, "9401")
	require.NoError(t, err)
	require.NoError(t, <-signalled)
	require.Len(t, res.Instances, 1)
	require.Equal(t, pool.Terminated, res.Instances[0].Result)
	require.Contains(t, res.Instances[0].Reason, "its agent reported FAILED")
	require.Less(t, res.Took, 30*time.Second, "terminated on the signal, not at the deregister timeout")
	it := w.Store.Item(in.ID)
	require.Equal(t, state.Terminated, it.State)
	require.Contains(t, it.SignalLog, "cleaning up after run 9401 failed")
	require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(in.ID))
	require.NotContains(t, w.Offered(t), in.ID, "an instance that may hold traces of a run is never offered")
	require.Empty(t, w.GitHub.RunnerNames(), "its runner is deleted all the same")
}
