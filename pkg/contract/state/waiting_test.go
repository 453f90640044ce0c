package state_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestWaiters: jobs waiting for room are read oldest first, per pool, a few at a time; a waiter
// is taken once, however many try at once; a census never counts one.
func TestWaiters(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Minute)
	for i, key := range []string{"j3", "j1", "j2"} {
		require.NoError(t, s.AddWaiter(ctx, state.Waiter{Pool: "linux", Key: key, Body: `{"job":"` + key + `"}`,
			Since: base.Add(time.Duration([]int{3, 1, 2}[i]) * time.Second)}))
	}
	require.NoError(t, s.AddWaiter(ctx, state.Waiter{Pool: "other", Key: "j9", Body: "{}", Since: base}))
	got, err := s.Waiters(ctx, "linux", 2)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, []string{"j1", "j2"}, []string{got[0].Key, got[1].Key}, "longest waiting first")
	require.Equal(t, `{"job":"j1"}`, got[0].Body)
	require.Equal(t, "linux", got[0].Pool)
	require.WithinDuration(t, base.Add(time.Second), got[0].Since, time.Millisecond)

	var took atomic.Int32
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			w, ok, err := s.TakeWaiter(ctx, "linux", "j1", state.AnyRound)
			if err == nil && ok && w.Key == "j1" {
				took.Add(1)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 1, took.Load(), "taken once")
	got, err = s.Waiters(ctx, "linux", 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
	_, ok, err := s.TakeWaiter(ctx, "linux", "j1", state.AnyRound)
	require.NoError(t, err)
	require.False(t, ok)

	// A try of an earlier round takes nothing; its own round's does.
	require.NoError(t, s.AddWaiter(ctx, state.Waiter{Pool: "linux", Key: "j5", Body: "{}", Since: base, Round: 3}))
	_, ok, err = s.TakeWaiter(ctx, "linux", "j5", 2)
	require.NoError(t, err)
	require.False(t, ok, "a stale try")
	waits, err := s.IsWaiting(ctx, "linux", "j5")
	require.NoError(t, err)
	require.True(t, waits)
	w, ok, err := s.TakeWaiter(ctx, "linux", "j5", 3)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 3, w.Round)
	waits, err = s.IsWaiting(ctx, "linux", "j5")
	require.NoError(t, err)
	require.False(t, waits, "taken")

	// A waiter kept for its next round: moved on only from the round it is at, its body with it;
	// never put back once taken.
	due := base.Add(time.Hour)
	require.NoError(t, s.AddWaiter(ctx, state.Waiter{Pool: "linux", Key: "j6", Body: `{"round":1}`, Since: base, Round: 1, Due: due}))
	ws, err := s.Waiters(ctx, "linux", 10)
	require.NoError(t, err)
	require.WithinDuration(t, due, waiterOf(ws, "j6").Due, time.Millisecond, "when its try is due")
	ok, err = s.NextRound(ctx, state.Waiter{Pool: "linux", Key: "j6", Body: `{"round":2}`, Round: 2}, 2)
	require.NoError(t, err)
	require.False(t, ok, "not at round 2")
	ok, err = s.NextRound(ctx, state.Waiter{Pool: "linux", Key: "j6", Body: `{"round":2}`, Round: 2, Due: due.Add(time.Minute)}, 1)
	require.NoError(t, err)
	require.True(t, ok)
	ws, err = s.Waiters(ctx, "linux", 10)
	require.NoError(t, err)
	require.WithinDuration(t, due.Add(time.Minute), waiterOf(ws, "j6").Due, time.Millisecond, "its next try's")
	_, ok, err = s.TakeWaiter(ctx, "linux", "j6", 1)
	require.NoError(t, err)
	require.False(t, ok, "round 1's try takes nothing now")
	w, ok, err = s.TakeWaiter(ctx, "linux", "j6", 2)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, `{"round":2}`, w.Body)
	require.WithinDuration(t, base, w.Since, time.Millisecond, "it has waited since it began")
	ok, err = s.NextRound(ctx, state.Waiter{Pool: "linux", Key: "j6", Body: "{}", Round: 3}, 2)
	require.NoError(t, err)
	require.False(t, ok, "taken: not put back")
	waits, err = s.IsWaiting(ctx, "linux", "j6")
	require.NoError(t, err)
	require.False(t, waits)

	c, err := s.Census(ctx, "linux")
	require.NoError(t, err)
	require.Zero(t, c.Live(), "a waiter is no instance")
	require.Error(t, s.AddWaiter(ctx, state.Waiter{Pool: "linux", Key: "4242", Body: "{}", Since: base}), "a run id is no job key")
}

// waiterOf returns the waiter of key among ws (a zero one when none is).
func waiterOf(ws []state.Waiter, key string) state.Waiter {
	for _, w := range ws {
		if w.Key == key {
			return w
		}
	}
	return state.Waiter{}
}
