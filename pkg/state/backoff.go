package state

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff waits a jittered, capped exponential delay before attempt+1 of a partial batch
// (unprocessed keys), or returns ctx's error.
func backoff(ctx context.Context, attempt int) error {
	d := min(50*time.Millisecond<<min(attempt, 6), 2*time.Second)
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
