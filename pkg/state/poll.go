package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hangar-ci/hangar/pkg/wait"
)

// Poll reads the items of ids (one BatchGetItem per 100) until check returns true. Its callers
// poll for an agent's answer to a write they have just made and rung, which takes an agent at
// least a read of its own: so the first read is not at once but after interval/4, and the wait
// grows by half each time up to interval (jittered): a quick answer is seen quickly, a slow one
// costs few reads. It honours ctx
// (give it the deadline). Items that do not exist are absent from the map check gets. A failed
// read is retried at the next tick; the last error is returned if ctx ends first.
func (s *Store) Poll(ctx context.Context, ids []string, interval time.Duration, check func(map[string]*Instance) bool) error {
	if interval <= 0 {
		return fmt.Errorf("poll: interval %s: want more than 0", interval)
	}
	var lastErr error
	backoff := wait.Backoff{Initial: max(interval/4, time.Millisecond), Max: interval, Factor: 1.5}
	if err := backoff.Sleep(ctx); err != nil {
		return err
	}
	for {
		items, err := s.GetMany(ctx, ids)
		if errors.Is(err, ErrBadItem) {
			err = nil // the items left out are not readable this time; the rest are
		}
		if err == nil {
			lastErr = nil
			if check(items) {
				return nil
			}
		} else {
			lastErr = err
		}
		if err := backoff.Sleep(ctx); err != nil {
			if lastErr != nil {
				return fmt.Errorf("%w (last read: %w)", err, lastErr)
			}
			return err
		}
	}
}
