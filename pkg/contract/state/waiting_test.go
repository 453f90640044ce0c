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

	c, err := s.Census(ctx, "linux")
	require.NoError(t, err)
	require.Zero(t, c.Live(), "a waiter is no instance")
	require.Error(t, s.AddWaiter(ctx, state.Waiter{Pool: "linux", Key: "4242", Body: "{}", Since: base}), "a run id is no job key")
}
