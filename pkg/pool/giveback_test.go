package pool_test

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

// giveBack gives some of run's instances back, as a provision does with what it took.
func giveBack(ctx context.Context, w *fake.World, run string, insts ...state.Instance) *pool.GivenBack {
	return w.Pool.GiveBack(ctx, pool.GiveBack{Run: run, Instances: insts, GitHub: w.GitHub, Names: state.RunnerNamesOf(fake.Stack),
		DeregisterTimeout: 30 * time.Second, PollInterval: 10 * time.Millisecond})
}

// TestGiveBackOnlyItsOwnRunners: a give-back of some of a run's instances deletes their runners,
// not those of the run's other instances (another provision of the same run keeps its own).
func TestGiveBackOnlyItsOwnRunners(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	mine := w.AddHeld(t, fake.Held{Run: "300"})
	theirs := w.AddHeld(t, fake.Held{Run: "300"})

	res := giveBack(ctx(t), w, "300", *mine)
	fake.RequireOutcome(t, res.Instances, mine.ID, pool.Returned)
	require.Equal(t, 1, res.RunnersDeleted)
	require.Equal(t, []string{state.RunnerNamesOf(fake.Stack).Name(theirs.ID, "300")}, w.GitHub.RunnerNames(),
		"the other instance's runner stays; this one's is gone")
	require.Equal(t, state.Running, w.Store.Item(theirs.ID).State)
}

// TestGiveBackLeavesWhatMovedOn: an instance the run no longer holds (another run claimed it after
// the copy given was read) is left to its holder: not written, offered or terminated.
func TestGiveBackLeavesWhatMovedOn(t *testing.T) {
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
	res := giveBack(ctx, w, "300", *in)
	fake.RequireOutcome(t, res.Instances, in.ID, pool.Already)
	it := w.Store.Item(in.ID)
	require.Equal(t, state.Running, it.State, "left to the run that holds it")
	require.Equal(t, "301", it.RunID)
	require.Equal(t, moved.Version, it.Version, "not written")
	require.Equal(t, ec2types.InstanceStateNameRunning, w.EC2.State(in.ID))
	require.Empty(t, w.Offered(t))
}

// TestGiveBackTenInOneWrite: a release of ten running instances moves them
// to idle in one transaction; when one of the ten moved on meanwhile (the transaction is
// cancelled for it), the other nine are still written, deregistered and offered, and the one
// that moved on is left to the run that holds it.
func TestGiveBackTenInOneWrite(t *testing.T) {
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
		res := giveBack(ctx, w, "300", held...)
		cancel()
		require.Equal(t, 1, w.Store.Calls("TransitionAll"), "lose=%v: one request for the ten", lose)
		want := make([]string, 0, len(held))
		for i, in := range held {
			if lose && i == 4 {
				fake.RequireOutcome(t, res.Instances, in.ID, pool.Already)
				require.Equal(t, "301", w.Store.Item(in.ID).RunID, "left to the run that holds it")
				continue
			}
			fake.RequireOutcome(t, res.Instances, in.ID, pool.Returned)
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
