package wait

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestJitter(t *testing.T) {
	t.Parallel()
	for range 1000 {
		j := Jitter(100 * time.Millisecond)
		require.GreaterOrEqual(t, j, 50*time.Millisecond)
		require.LessOrEqual(t, j, 100*time.Millisecond)
	}
	require.Equal(t, time.Duration(0), Jitter(0))
}

func TestSleep(t *testing.T) {
	t.Parallel()
	start := time.Now()
	require.NoError(t, Sleep(context.Background(), 20*time.Millisecond))
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start = time.Now()
	require.ErrorIs(t, Sleep(ctx, time.Hour), context.Canceled)
	require.Less(t, time.Since(start), time.Second, "a cancelled wait returns at once")
	require.ErrorIs(t, Sleep(ctx, 0), context.Canceled)
}
