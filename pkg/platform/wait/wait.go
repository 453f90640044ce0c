// Package wait is the one way Hangar's code waits: for a duration that honours cancellation
// (Sleep), with jitter so that many waiters do not act in step (Jitter), and, between attempts,
// growing to a cap (Backoff: no caller computes a backoff by hand).
package wait

import (
	"context"
	"math/rand/v2"
	"time"
)

// Sleep waits d, or until ctx ends (returning its error). A d of zero or less returns at once.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Jitter returns a duration spread evenly over [d/2, d].
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// Clock is how a wait passes time: the real clock (Real), or, in tests, one that passes it at
// once and records what it was asked to wait.
type Clock interface {
	Sleep(ctx context.Context, d time.Duration) error
}

// Real is the real clock: Sleep.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Sleep(ctx context.Context, d time.Duration) error { return Sleep(ctx, d) }
