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
	"github.com/hangar-ci/hangar/pkg/steps/release"
)

// These tests run release's orchestration on the in-memory fakes (internal/testkit/fake): no
// emulator, no agent process. The fake agent deregisters an instance given back as a live one
// would, unless a test tells it otherwise.

func fakeReleaser(t *testing.T, w *fake.World, deregister time.Duration) *release.Releaser {
	t.Helper()
	r, err := release.New(release.Config{DeregisterTimeout: deregister, PollInterval: 10 * time.Millisecond},
		release.Deps{Store: w.Store, GitHub: w.GitHub, EC2: w.EC2, Pools: w.Pools, Runners: state.RunnerNamesOf(fake.Stack), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
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

func requireOutcome(t *testing.T, res *release.Result, id, result string) release.Outcome {
	t.Helper()
	for _, o := range res.Instances {
		if o.ID == id {
			require.Equal(t, result, o.Result, "%s: %s", id, o.Reason)
			return o
		}
	}
	t.Fatalf("no outcome for %s in %+v", id, res.Instances)
	return release.Outcome{}
}

func TestFakeReleasedInstanceIsIdleAndOffered(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	in := w.AddHeld(t, fake.Held{Run: "300"})

	res := fakeRelease(t, w, "300")
	requireOutcome(t, res, in.ID, release.Returned)
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

func TestFakeReuseNeverTerminates(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, fake.Pool(t, "linux", func(doc map[string]any) { doc["reuse"] = "never" }))
	in := w.AddHeld(t, fake.Held{Run: "300"})

	res := fakeRelease(t, w, "300")
	o := requireOutcome(t, res, in.ID, release.Terminated)
	require.Contains(t, o.Reason, "never")
	require.Equal(t, state.Terminated, w.Store.Item(in.ID).State)
	require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(in.ID))
	require.Empty(t, w.Offered(t), "no offer")
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
		{name: "offered", result: release.Returned},
		{name: "marked to retire", retire: "its pool is drained", result: release.Terminated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := fake.NewWorld(t, nil)
			in := w.AddHeld(t, fake.Held{Run: "300", Home: &state.Home{IdleSecs: 420, Queue: w.Doc.QueueURL, Retire: tc.retire}})
			w.SSM.Reset()
			start := time.Now()

			res := fakeRelease(t, w, "300")
			o := requireOutcome(t, res, in.ID, tc.result)
			require.Zero(t, w.SSM.Calls("GetParametersByPath")+w.SSM.Calls("GetParameter"), "no pool document read")
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
			require.Equal(t, []string{in.ID}, w.Offered(t), "offered on the queue the item names")
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
	o := requireOutcome(t, res, in.ID, release.Terminated)
	require.Contains(t, o.Reason, "did not deregister within 1s")
	require.Equal(t, state.Terminated, w.Store.Item(in.ID).State)
	require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(in.ID))
	require.Empty(t, w.Offered(t))
}

func TestFakeUnacknowledgedClaimIsOfferedAtOnce(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	in := w.AddHeld(t, fake.Held{Run: "300", Claimed: true, Unacked: true, Agent: fake.Silent})

	res := fakeRelease(t, w, "300")
	requireOutcome(t, res, in.ID, release.Returned)
	it := w.Store.Item(in.ID)
	require.Equal(t, state.Idle, it.State)
	require.Empty(t, it.RunID)
	require.Empty(t, it.LastRunID, "a claim never acknowledged served nothing")
	require.NotEqual(t, state.SignalDeregistered, it.Signal, "offered without waiting for a deregistration")
	require.Equal(t, []string{in.ID}, w.Offered(t))
}

func TestFakeInstanceThatMovedOnIsLeftAlone(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	in := w.AddHeld(t, fake.Held{Run: "300"})
	// Meanwhile the run let it go and another run claimed it: the copy release holds is stale.
	now := w.AddHeld(t, fake.Held{Run: "301"})
	moved := *w.Store.Item(now.ID)
	moved.ID, moved.ARN = in.ID, in.ARN
	moved.Version = in.Version + 3
	w.Store.Put(moved)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := fakeReleaser(t, w, 30*time.Second).GiveBack(ctx, "300", []state.Instance{*in})
	requireOutcome(t, res, in.ID, release.Already)
	it := w.Store.Item(in.ID)
	require.Equal(t, state.Running, it.State, "left to the run that holds it")
	require.Equal(t, "301", it.RunID)
	require.Equal(t, moved.Version, it.Version, "not written")
	require.Equal(t, ec2types.InstanceStateNameRunning, w.EC2.State(in.ID))
	require.Empty(t, w.Offered(t))
}

// TestFakeTenGoBackInOneWriteAndOneLostBlocksNone: a release of ten running instances moves them
// to idle in one transaction; when one of the ten moved on meanwhile (the transaction is
// cancelled for it), the other nine are still written, deregistered and offered, and the one
// that moved on is left to the run that holds it.
func TestFakeTenGoBackInOneWriteAndOneLostBlocksNone(t *testing.T) {
	t.Parallel()
	for _, lose := range []bool{false, true} {
		w := fake.NewWorld(t, nil)
		held := make([]state.Instance, 10)
		for i := range held {
			held[i] = *w.AddHeld(t, fake.Held{Run: "300"})
		}
		if lose {
			moved := *w.Store.Item(held[4].ID)
			moved.RunID, moved.Version = "301", moved.Version+2
			w.Store.Put(moved)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res := fakeReleaser(t, w, 30*time.Second).GiveBack(ctx, "300", held)
		cancel()
		require.Equal(t, 1, w.Store.Calls("TransitionAll"), "lose=%v: one request for the ten", lose)
		want := make([]string, 0, len(held))
		for i, in := range held {
			if lose && i == 4 {
				requireOutcome(t, res, in.ID, release.Already)
				require.Equal(t, "301", w.Store.Item(in.ID).RunID, "left to the run that holds it")
				continue
			}
			requireOutcome(t, res, in.ID, release.Returned)
			it := w.Store.Item(in.ID)
			require.Equal(t, state.Idle, it.State)
			require.Equal(t, "300", it.LastRunID)
			want = append(want, in.ID)
		}
		require.ElementsMatch(t, want, w.Offered(t), "lose=%v: the others idle and offered", lose)
		if lose {
			require.Equal(t, 9, w.Store.Calls("Transition"), "the nine others written one by one after the cancelled transaction")
		}
	}
}
