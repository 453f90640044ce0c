package release_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/steps/release"
)

// These tests run release's orchestration on the in-memory fakes (internal/testkit/fake): no
// emulator, no agent process. The fake agent deregisters an instance given back as a live one
// would, unless a test tells it otherwise.

func fakeReleaser(t *testing.T, w *fake.World, deregister time.Duration) *release.Releaser {
	t.Helper()
	r, err := release.New(release.Config{DeregisterTimeout: deregister, PollInterval: 10 * time.Millisecond},
		release.Deps{Pool: w.Pool, GitHub: w.GitHub, Runners: state.RunnerNamesOf(fake.Stack), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	return r
}

func fakeRelease(t *testing.T, w *fake.World, run string) *release.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := fakeReleaser(t, w, 30*time.Second).Release(ctx, run)
	require.NoError(t, err)
	return res
}

func TestFakeReleasedInstanceIsIdleAndOffered(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	in := w.AddHeld(t, fake.Held{Run: "300"})

	res := fakeRelease(t, w, "300")
	fake.RequireOutcome(t, res.Instances, in.ID, pool.Returned)
	it := w.Store.Item(in.ID)
	require.Equal(t, state.Idle, it.State)
	require.Empty(t, it.RunID)
	require.Equal(t, "300", it.LastRunID)
	require.Equal(t, []string{in.ID}, w.Offered(t), "offered on the pool's queue")
	msgs, err := w.SQS.Offers(w.Doc.QueueURL, w.Doc.Name)
	require.NoError(t, err)
	require.Equal(t, it.Version, msgs[0].Version, "the offer is of the item as it is now")
	require.Equal(t, 1, res.RunnersDeleted)
	require.Empty(t, w.GitHub.RunnerNames(), "the run's runner is gone from GitHub")
	require.Equal(t, ec2types.InstanceStateNameRunning, w.EC2.State(in.ID))
}

// TestFakeReuseNeverTerminates: a pool whose reuse is never terminates each instance when its run
// releases it, after its runner is deregistered, and offers none.
func TestFakeReuseNeverTerminates(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, fake.Pool(t, "linux", func(doc map[string]any) { doc["reuse"] = "never" }))
	held := []*state.Instance{w.AddHeld(t, fake.Held{Run: "300"}), w.AddHeld(t, fake.Held{Run: "300"})}

	res := fakeRelease(t, w, "300")
	require.Len(t, res.Instances, 2)
	for _, in := range held {
		o := fake.RequireOutcome(t, res.Instances, in.ID, pool.Terminated)
		require.Contains(t, o.Reason, "reuse is never")
		it := w.Store.Item(in.ID)
		require.Equal(t, state.Terminated, it.State)
		require.Contains(t, it.StateReason, "reuse is never")
		require.True(t, it.SignalFor(state.SignalDeregistered, "300", 0), "%s: its runner was deregistered first", in.ID)
		require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(in.ID))
	}
	require.Empty(t, w.Offered(t), "no offer")
	require.Equal(t, 2, res.RunnersDeleted)
	require.Empty(t, w.GitHub.RunnerNames(), "runners deregistered and deleted")
}

// TestFakeReleaseByItemAlone: an item that says how it goes back (state.Home, written by its
// launch or claim) is given back without reading the pool documents: offered on the queue it
// names, with its idle deadline; or, marked to retire (a drain while it served), terminated.
func TestFakeReleaseByItemAlone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		retire string
		result string
	}{
		{name: "offered", result: pool.Returned},
		{name: "marked to retire", retire: "its pool is drained", result: pool.Terminated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := fake.NewWorld(t, nil)
			in := w.AddHeld(t, fake.Held{Run: "300", Home: &state.Home{IdleSecs: 420, Queue: w.Doc.QueueURL, Retire: tc.retire}})
			w.SSM.Reset()
			start := time.Now()

			res := fakeRelease(t, w, "300")
			o := fake.RequireOutcome(t, res.Instances, in.ID, tc.result)
			require.Zero(t, w.SSM.Calls("GetParametersByPath")+w.SSM.Calls("GetParameter"), "no pool document read")
			require.Empty(t, res.Warnings)
			require.Equal(t, 1, res.RunnersDeleted)
			require.Empty(t, w.GitHub.RunnerNames(), "the run's runner is gone")
			it := w.Store.Item(in.ID)
			if tc.retire != "" {
				require.Equal(t, tc.retire, o.Reason)
				require.Equal(t, state.Terminated, it.State)
				require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(in.ID))
				require.Empty(t, w.Offered(t), "no offer")
				return
			}
			require.Equal(t, state.Idle, it.State)
			require.WithinDuration(t, start.Add(420*time.Second), it.Threshold, 5*time.Second, "the item's idle timeout, not the document's")
			require.NotEqual(t, w.Doc.Timeout(state.Idle), 420*time.Second)
			require.Equal(t, []string{in.ID}, w.Offered(t), "offered once, on the queue the item names")
		})
	}
}

func TestFakeAgentNotDeregisteringInTimeIsTerminated(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	in := w.AddHeld(t, fake.Held{Run: "300", Agent: fake.NoDeregister})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := fakeReleaser(t, w, time.Second).Release(ctx, "300")
	require.NoError(t, err)
	o := fake.RequireOutcome(t, res.Instances, in.ID, pool.Terminated)
	require.Contains(t, o.Reason, "did not deregister within 1s")
	require.Equal(t, state.Terminated, w.Store.Item(in.ID).State)
	require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(in.ID))
	require.Empty(t, w.Offered(t))
}

// TestFakeUnacknowledgedClaimIsOfferedAtOnce: a claim its agent has not yet noticed (the
// provision that made it was killed before ringing, say) is given back and offered at once rather
// than waited on for a deregistration that cannot come; the agent, when it reads its item again,
// cannot take the claim any more (its acknowledgement is conditional on the claim's version).
func TestFakeUnacknowledgedClaimIsOfferedAtOnce(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	in := w.AddHeld(t, fake.Held{Run: "300", Claimed: true, Unacked: true, Agent: fake.Silent})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := fakeReleaser(t, w, 2*time.Minute).Release(ctx, "300")
	require.NoError(t, err)
	fake.RequireOutcome(t, res.Instances, in.ID, pool.Returned)
	require.Less(t, res.Took, time.Minute, "not waited on for a deregistration")
	it := w.Store.Item(in.ID)
	require.Equal(t, state.Idle, it.State)
	require.Equal(t, in.Version+1, it.Version, "one write")
	require.Contains(t, it.StateReason, "before its agent took the claim")
	require.Empty(t, it.RunID)
	require.Empty(t, it.LastRunID, "a claim never acknowledged served nothing")
	require.NotEqual(t, state.SignalDeregistered, it.Signal, "offered without waiting for a deregistration")
	require.Equal(t, []string{in.ID}, w.Offered(t), "offered once, at once")

	// The agent reads its item again: its acknowledgement of the claim is refused, and it never
	// serves the run.
	require.ErrorIs(t, w.Store.AgentAck(in.ID, in.Version, time.Now()), state.ErrConflict)
	require.Less(t, w.Store.Item(in.ID).AckVersion, in.Version, "the claim was never acknowledged")
	require.Empty(t, w.GitHub.RunnerNames(), "no runner registered for the run")
}
