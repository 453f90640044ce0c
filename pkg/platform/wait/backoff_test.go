package wait

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBackoffDelays: each delay lies in [d/2, d] of its step, the steps grow by the factor up to
// the cap, and Reset starts over.
func TestBackoffDelays(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	tests := []struct {
		name string
		b    Backoff
		want []time.Duration // the steps: delay n lies in [want[n]/2, want[n]]
	}{
		{"doubles up to the cap", Backoff{Initial: 50 * ms, Max: 2 * time.Second},
			[]time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2 * time.Second, 2 * time.Second}},
		{"factor 1.5", Backoff{Initial: 100 * ms, Max: time.Second, Factor: 1.5},
			[]time.Duration{100 * ms, 150 * ms, 225 * ms, 337500 * time.Microsecond, 506250 * time.Microsecond, 759375 * time.Microsecond, time.Second}},
		{"steady: no Max", Backoff{Initial: 5 * time.Second}, []time.Duration{5 * time.Second, 5 * time.Second, 5 * time.Second}},
		{"steady: Max is Initial", Backoff{Initial: time.Second, Max: time.Second}, []time.Duration{time.Second, time.Second}},
		{"Initial above Max: the cap wins", Backoff{Initial: 10 * time.Second, Max: 5 * time.Second},
			[]time.Duration{5 * time.Second, 5 * time.Second}},
		{"huge: no overflow", Backoff{Initial: time.Duration(1) << 61, Max: time.Duration(1<<63 - 1)},
			[]time.Duration{1 << 61, 1 << 62, 1<<63 - 1, 1<<63 - 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for round := range 50 { // jitter is random: many rounds, each reset
				b := tc.b
				for i, step := range tc.want {
					d := b.Next()
					require.GreaterOrEqual(t, d, step/2, "round %d delay %d", round, i)
					require.LessOrEqual(t, d, step, "round %d delay %d", round, i)
				}
				b.Reset()
				d := b.Next()
				require.GreaterOrEqual(t, d, tc.want[0]/2, "after Reset: the first step again")
				require.LessOrEqual(t, d, tc.want[0], "after Reset: the first step again")
			}
		})
	}
}

// TestBackoffJitters: the delays of one step are spread, not all the same.
func TestBackoffJitters(t *testing.T) {
	t.Parallel()
	seen := map[time.Duration]bool{}
	for range 100 {
		b := Backoff{Initial: time.Second, Max: time.Second}
		seen[b.Next()] = true
	}
	require.Greater(t, len(seen), 10)
}

// TestBackoffSleep: Sleep waits about the coming delay and grows the next; a cancelled context
// ends it at once with the context's error.
func TestBackoffSleep(t *testing.T) {
	t.Parallel()
	b := Backoff{Initial: 20 * time.Millisecond, Max: time.Hour}
	start := time.Now()
	require.NoError(t, b.Sleep(context.Background()))
	require.GreaterOrEqual(t, time.Since(start), 10*time.Millisecond, "at least half the first step")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	long := Backoff{Initial: time.Hour}
	start = time.Now()
	require.ErrorIs(t, long.Sleep(ctx), context.Canceled)
	require.Less(t, time.Since(start), time.Second, "a cancelled wait returns at once")

	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, long.Sleep(ctx), context.DeadlineExceeded, "the deadline ends a wait longer than it")
}

// recording is a clock that passes time at once.
type recording struct{ waits []time.Duration }

func (r *recording) Sleep(ctx context.Context, d time.Duration) error {
	r.waits = append(r.waits, d)
	return ctx.Err()
}

// TestBackoffOnAClock: a backoff with a clock waits on it, not in real time.
func TestBackoffOnAClock(t *testing.T) {
	t.Parallel()
	c := &recording{}
	b := Backoff{Initial: time.Hour, Max: 4 * time.Hour, Clock: c}
	start := time.Now()
	for range 3 {
		require.NoError(t, b.Sleep(context.Background()))
	}
	require.Less(t, time.Since(start), time.Minute, "no real hour passed")
	require.Len(t, c.waits, 3)
	require.GreaterOrEqual(t, c.waits[2], 2*time.Hour, "the third step: four hours, jittered")
}
