package state_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestTransitionAll: against DynamoDB Local, ten transitions go in one request; what it returns
// is what the table holds (Change.Apply agrees with the write); a transaction cancelled for one
// lost condition of ten settles that one as a conflict carrying the item as it is and writes the
// other nine; an invalid change or a second change of one instance fails alone, before any
// request.
func TestTransitionAll(t *testing.T) {
	t.Parallel()
	const run = "777"
	changes := func(insts []*state.Instance, to state.State) ([]state.Change, []state.Instance) {
		cs := make([]state.Change, len(insts))
		befores := make([]state.Instance, len(insts))
		for i, in := range insts {
			cs[i] = state.Change{InstanceID: in.ID, Pool: in.Pool, From: in.State, To: to, Version: in.Version, RunID: run,
				Threshold: later(9 * time.Minute), Reason: "batch " + string(to)}
			befores[i] = *in
		}
		return cs, befores
	}
	matchesTable := func(t *testing.T, s *state.Store, got []state.Written, skip map[int]bool) {
		t.Helper()
		var ids []string
		for i, w := range got {
			if !skip[i] {
				require.NoError(t, w.Err)
				ids = append(ids, w.Item.ID)
			}
		}
		items, err := s.GetMany(testbed.Context(t, 30*time.Second), ids)
		require.NoError(t, err)
		for i, w := range got {
			if !skip[i] {
				require.Equal(t, *items[w.Item.ID], *w.Item, "item %d", i)
			}
		}
	}

	claimedN := func(t *testing.T, s *state.Store, n int) []*state.Instance {
		insts := make([]*state.Instance, n)
		for i := range insts {
			insts[i] = reach(t, s, state.Claimed, run)
		}
		return insts
	}

	t.Run("claims write the way home, and a mark to retire stays", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t)
		ctx := testbed.Context(t, 30*time.Second)
		home := &state.Home{IdleSecs: 300, Queue: "https://sqs.us-east-1.amazonaws.com/123456789012/hangar-linux"}
		claim := func(in *state.Instance, h *state.Home) state.Change {
			return state.Change{InstanceID: in.ID, Pool: in.Pool, From: state.Idle, To: state.Claimed, Version: in.Version,
				Assign: &state.Assignment{RunID: run, Repo: "octo/app"}, Home: h, Threshold: later(5 * time.Minute)}
		}
		a, b := reach(t, s, state.Idle, ""), reach(t, s, state.Idle, "")
		got := s.TransitionAll(ctx, []state.Change{claim(a, home), claim(b, home)}, []state.Instance{*a, *b})
		matchesTable(t, s, got, nil)
		require.Equal(t, *home, got[0].Item.Home)

		marked, ok, err := s.MarkRetire(ctx, a.ID, run, "its pool is drained")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, got[0].Item.Version, marked.Version, "a mark moves no version")
		_, err = s.Transition(ctx, state.Change{InstanceID: a.ID, Pool: a.Pool, From: state.Claimed, To: state.Idle,
			Version: marked.Version, RunID: run, Threshold: later(time.Minute)})
		require.ErrorIs(t, err, state.ErrConflict, "a give-back that did not see the mark loses")
		require.ErrorContains(t, err, "marked to retire (its pool is drained)")
		_, ok, err = s.MarkRetire(ctx, b.ID, "778", "its pool is drained")
		require.NoError(t, err)
		require.False(t, ok, "only the run that holds it is marked for")

		back, err := s.Transition(ctx, state.Change{InstanceID: a.ID, Pool: a.Pool, From: state.Claimed, To: state.Idle,
			Version: marked.Version, RunID: run, Threshold: later(time.Minute), Marked: true})
		require.NoError(t, err)
		require.Equal(t, "its pool is drained", back.Retire, "the mark outlives the run")
		again, err := s.Transition(ctx, claim(back, &state.Home{IdleSecs: 60, Queue: home.Queue}))
		require.NoError(t, err)
		require.Equal(t, state.Home{IdleSecs: 60, Queue: home.Queue, Retire: "its pool is drained"}, again.Home,
			"a later claim updates the timeout, never clears the mark")

		_, err = s.Transition(ctx, claim(b, &state.Home{Queue: home.Queue}))
		require.ErrorContains(t, err, "want the pool's idle timeout")
	})

	t.Run("ten in one request, as the table has them", func(t *testing.T) {
		t.Parallel()
		s, db := newStore(t)
		insts := claimedN(t, s, 10)
		cs, befores := changes(insts, state.Running)
		before := db.calls.Load()
		got := s.TransitionAll(testbed.Context(t, 30*time.Second), cs, befores)
		require.Equal(t, int64(1), db.calls.Load()-before, "one TransactWriteItems")
		for i, w := range got {
			require.NoError(t, w.Err)
			require.Equal(t, state.Running, w.Item.State)
			require.Equal(t, insts[i].Version+1, w.Item.Version)
		}
		matchesTable(t, s, got, nil)

		// And back to idle, the way a release goes: the run leaves, lastRunId stays.
		running := make([]*state.Instance, len(got))
		for i, w := range got {
			running[i] = w.Item
		}
		cs, befores = changes(running, state.Idle)
		got = s.TransitionAll(testbed.Context(t, 30*time.Second), cs, befores)
		for _, w := range got {
			require.NoError(t, w.Err)
			require.Equal(t, state.Idle, w.Item.State)
			require.Empty(t, w.Item.RunID)
			require.Equal(t, run, w.Item.LastRunID)
		}
		matchesTable(t, s, got, nil)
	})

	t.Run("one lost condition of ten blocks no other", func(t *testing.T) {
		t.Parallel()
		s, db := newStore(t)
		insts := claimedN(t, s, 10)
		// Another writer moves the fourth on first: the batch's view of it is stale.
		moved := move(t, s, insts[3], state.Idle, run)
		cs, befores := changes(insts, state.Running)
		before := db.calls.Load()
		got := s.TransitionAll(testbed.Context(t, 30*time.Second), cs, befores)
		require.Equal(t, int64(1+9), db.calls.Load()-before, "the cancelled transaction, then nine single writes")
		var conflict *state.ConflictError
		require.ErrorAs(t, got[3].Err, &conflict)
		require.Nil(t, got[3].Item)
		require.NotNil(t, conflict.Current)
		require.Equal(t, state.Idle, conflict.Current.State)
		require.Equal(t, moved.Version, conflict.Current.Version)
		matchesTable(t, s, got, map[int]bool{3: true})
		for i, w := range got {
			if i != 3 {
				require.Equal(t, state.Running, w.Item.State)
			}
		}
	})

	t.Run("a transaction whose answer is lost is known by what it wrote", func(t *testing.T) {
		t.Parallel()
		s, db := newStore(t)
		insts := claimedN(t, s, 10)
		cs, befores := changes(insts, state.Running)
		db.loseAnswer.Store(true)
		before := db.calls.Load()
		got := s.TransitionAll(testbed.Context(t, 30*time.Second), cs, befores)
		require.Equal(t, int64(1+10), db.calls.Load()-before, "the transaction, then each item alone")
		for i, w := range got {
			require.NoError(t, w.Err, "item %d: the transaction wrote it", i)
			require.Equal(t, state.Running, w.Item.State)
			require.Equal(t, insts[i].Version+1, w.Item.Version, "written once")
		}
		matchesTable(t, s, got, nil)
	})

	t.Run("an invalid or repeated change fails alone, before any request", func(t *testing.T) {
		t.Parallel()
		s, db := newStore(t)
		a, b := reach(t, s, state.Claimed, run), reach(t, s, state.Claimed, run)
		cs, befores := changes([]*state.Instance{a, b, a}, state.Running)
		cs[1].Threshold = time.Time{} // a live state without a deadline
		before := db.calls.Load()
		got := s.TransitionAll(testbed.Context(t, 30*time.Second), cs, befores)
		require.Equal(t, int64(1), db.calls.Load()-before, "only the valid change is written, alone")
		require.NoError(t, got[0].Err)
		require.ErrorContains(t, got[1].Err, "threshold is not set")
		require.ErrorContains(t, got[2].Err, "changed twice in one batch")
		matchesTable(t, s, got, map[int]bool{1: true, 2: true})

		got = s.TransitionAll(testbed.Context(t, 30*time.Second), cs[:1], nil)
		require.ErrorContains(t, got[0].Err, "want one per change")
	})
}
