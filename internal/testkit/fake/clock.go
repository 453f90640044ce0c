package fake

import (
	"context"
	"sync"
	"time"
)

// Clock passes time at once, as a test wants a backoff's waits to pass (wait.Clock), and records
// each wait it was asked for; a context that has ended still ends the wait with its error.
type Clock struct {
	mu     sync.Mutex
	sleeps []time.Duration
}

// Sleep records d and returns at once.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.mu.Unlock()
	return ctx.Err()
}

// Sleeps returns the waits asked for so far, in order.
func (c *Clock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}
