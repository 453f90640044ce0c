package state_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestLegalTransitions drives every transition of docs/design.md §3 against DynamoDB Local and
// checks what each writes.
func TestLegalTransitions(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	const run = "4242"
	tests := []struct {
		from, to state.State
		fromRun  bool // the from-state holds a run
		wantRun  string
		wantLast string
	}{
		{state.Created, state.Running, true, run, ""},
		{state.Created, state.Idle, false, "", ""},
		{state.Idle, state.Claimed, false, run, ""},
		{state.Stopped, state.Claimed, false, run, ""},
		{state.Claimed, state.Running, true, run, ""},
		{state.Claimed, state.Idle, true, "", run},
		{state.Running, state.Idle, true, "", run},
		{state.Idle, state.Stopped, false, "", ""},
		{state.Stopped, state.Idle, false, "", ""},
		{state.Created, state.Terminated, false, "", ""},
		{state.Idle, state.Terminated, false, "", ""},
		{state.Claimed, state.Terminated, true, "", run},
		{state.Running, state.Terminated, true, "", run},
		{state.Stopped, state.Terminated, false, "", ""},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s→%s", tc.from, tc.to), func(t *testing.T) {
			t.Parallel()
			var in *state.Instance
			if tc.from == state.Created && tc.fromRun {
				in = create(t, s, run)
			} else {
				in = reach(t, s, tc.from, run)
			}
			require.Equal(t, tc.from, in.State)
			c := state.Change{InstanceID: in.ID, Pool: in.Pool, From: tc.from, To: tc.to, Version: in.Version,
				Threshold: later(7 * time.Minute), Reason: "test"}
			wantAssign := assign(run)
			switch {
			case tc.to == state.Claimed:
				c.Assign = wantAssign
			case tc.fromRun:
				c.RunID = run
			}
			got, err := s.Transition(testbed.Context(t, 30*time.Second), c)
			require.NoError(t, err)
			require.Equal(t, tc.to, got.State)
			require.Equal(t, in.Version+1, got.Version)
			require.Equal(t, tc.wantRun, got.RunID)
			require.Equal(t, tc.wantLast, got.LastRunID)
			require.Equal(t, "test", got.StateReason)
			if tc.to == state.Terminated {
				require.WithinDuration(t, time.Now(), got.Threshold, time.Minute, "terminated: the threshold is the end")
				require.Equal(t, state.PoolStateShard(testPool, state.Terminated, in.ID), got.PoolStateShard, "terminated: history, found by pool and end")
				require.InDelta(t, time.Now().Add(state.DefaultHistoryRetention).Unix(), got.ExpiresAt, 60)
			} else {
				require.Equal(t, c.Threshold.UnixMilli(), got.Threshold.UnixMilli())
				require.Equal(t, state.PoolStateShard(testPool, tc.to, in.ID), got.PoolStateShard)
				require.Zero(t, got.ExpiresAt)
			}
			if tc.to == state.Claimed {
				want := *wantAssign
				require.WithinDuration(t, time.Now(), got.AssignedAt, time.Minute, "the claim records when")
				want.AssignedAt, want.Claimed = got.AssignedAt, true
				require.Equal(t, want, got.Assignment)
			}
			if tc.wantRun == "" {
				require.Empty(t, got.Labels)
			}
			// What the store returned is what is stored.
			stored, err := s.Get(testbed.Context(t, 10*time.Second), in.ID)
			require.NoError(t, err)
			require.Equal(t, *got, *stored)
		})
	}
}

// TestIllegalTransitionsRefused: every pair outside the state machine is refused before any
// request, and leaves the item as it was.
func TestIllegalTransitionsRefused(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	var legal int
	for _, from := range state.States {
		for _, to := range state.States {
			if state.Allowed(from, to) {
				legal++
				continue
			}
			t.Run(fmt.Sprintf("%s→%s", from, to), func(t *testing.T) {
				in := reach(t, s, from, "77")
				before := db.calls.Load()
				_, err := s.Transition(testbed.Context(t, 10*time.Second), state.Change{
					InstanceID: in.ID, Pool: in.Pool, From: from, To: to, Version: in.Version, RunID: "77",
					Assign: assign("77"), Threshold: later(time.Minute),
				})
				require.ErrorIs(t, err, state.ErrIllegalTransition)
				require.Contains(t, err.Error(), fmt.Sprintf("%s → %s", from, to))
				require.Equal(t, before, db.calls.Load(), "an illegal transition makes no request")
				after, err := s.Get(testbed.Context(t, 10*time.Second), in.ID)
				require.NoError(t, err)
				require.Equal(t, *in, *after)
			})
		}
	}
	require.Equal(t, 14, legal, "the state machine of docs/design.md §3 has 14 transitions")
}

// TestStaleWritersLose: a write naming an old version, another run, the wrong state or the wrong
// pool is refused, and the error says who holds the instance now.
func TestStaleWritersLose(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := testbed.Context(t, time.Minute)
	in := reach(t, s, state.Running, "100")

	tests := []struct {
		name   string
		change state.Change
	}{
		{"old version", state.Change{From: state.Running, To: state.Idle, Version: in.Version - 1, RunID: "100"}},
		{"other run", state.Change{From: state.Running, To: state.Idle, Version: in.Version, RunID: "101"}},
		{"wrong state", state.Change{From: state.Claimed, To: state.Running, Version: in.Version, RunID: "100"}},
		{"wrong pool", state.Change{Pool: "other", From: state.Running, To: state.Idle, Version: in.Version, RunID: "100"}},
		{"terminate stale", state.Change{From: state.Running, To: state.Terminated, Version: in.Version + 1}},
	}
	for _, tc := range tests {
		c := tc.change
		c.InstanceID = in.ID
		if c.Pool == "" {
			c.Pool = testPool
		}
		c.Threshold = later(time.Minute)
		_, err := s.Transition(ctx, c)
		var conflict *state.ConflictError
		require.ErrorAs(t, err, &conflict, tc.name)
		require.ErrorIs(t, err, state.ErrConflict)
		require.NotNil(t, conflict.Current, tc.name)
		require.Equal(t, in, conflict.Current, tc.name)
		require.Contains(t, err.Error(), "running by run 100", tc.name)
	}
	// A missing item is a conflict without a current item.
	_, err := s.Transition(ctx, state.Change{InstanceID: newID(), Pool: testPool, From: state.Idle, To: state.Stopped, Version: 1, Threshold: later(time.Minute)})
	var conflict *state.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Nil(t, conflict.Current)
	require.Contains(t, err.Error(), "has no item")

	got, err := s.Get(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, in, got, "no losing write changed anything")
}

// TestOneClaimWins: many claimers race for one idle instance; exactly one wins and every loser is
// told the winner's run.
func TestOneClaimWins(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := testbed.Context(t, time.Minute)
	for round := range 5 {
		in := reach(t, s, state.Idle, "")
		const claimers = 20
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			winner string
			losers int
		)
		for c := range claimers {
			run := fmt.Sprint(1000 + c)
			wg.Go(func() {
				_, err := s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: in.Pool, From: state.Idle, To: state.Claimed,
					Version: in.Version, Assign: assign(run), Threshold: later(time.Minute)})
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					require.Empty(t, winner, "round %d: two claims won", round)
					winner = run
					return
				}
				var conflict *state.ConflictError
				require.True(t, errors.As(err, &conflict), "round %d: %v", round, err)
				losers++
			})
		}
		wg.Wait()
		require.NotEmpty(t, winner)
		require.Equal(t, claimers-1, losers)
		got, err := s.Get(ctx, in.ID)
		require.NoError(t, err)
		require.Equal(t, winner, got.RunID)
		require.Equal(t, in.Version+1, got.Version)
	}
}
