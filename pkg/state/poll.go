package state

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Poll reads the items of ids (one BatchGetItem per 100) every interval, jittered, until check
// returns true. It honours ctx (give it the deadline). Items that do not exist are absent from
// the map check gets. A read that fails is retried at the next tick; the last error is returned
// if ctx ends first.
func (s *Store) Poll(ctx context.Context, ids []string, interval time.Duration, check func(map[string]*Instance) bool) error {
	if interval <= 0 {
		return fmt.Errorf("poll: interval %s: want more than 0", interval)
	}
	var lastErr error
	for {
		items, err := s.GetMany(ctx, ids)
		if err == nil {
			lastErr = nil
			if check(items) {
				return nil
			}
		} else {
			lastErr = err
		}
		wait := interval/2 + rand.N(interval/2+1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			if lastErr != nil {
				return fmt.Errorf("%w (last read: %v)", ctx.Err(), lastErr)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}
