package agent

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSettledWaitsForTheAgentToWaitAgain: the listener's hold after a hand-over ends when the
// agent comes back to waiting on its item after the hand-over arrived, not on an earlier return,
// and at once when that has happened already; a cancelled context ends it too.
func TestSettledWaitsForTheAgentToWaitAgain(t *testing.T) {
	t.Parallel()
	a, err := New(validConfig(), &countingReads{}, nil, nil, nil, nil)
	require.NoError(t, err)
	a.waiting() // before the hand-over: does not count
	arrived := time.Now()
	done := make(chan struct{})
	go func() {
		a.settled(context.Background(), arrived)
		close(done)
	}()
	released := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	require.Never(t, released, 200*time.Millisecond, 10*time.Millisecond, "held while the agent acts on the hand-over")
	a.waiting()
	require.Eventually(t, released, 10*time.Second, 5*time.Millisecond, "released once the agent waits again")

	start := time.Now()
	a.settled(context.Background(), arrived) // progressed since already
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a.settled(ctx, time.Now())
	require.Less(t, time.Since(start), settleWait, "neither waited out the bound")
}
