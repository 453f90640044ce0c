package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hangar-ci/hangar/pkg/platform/wait"
)

// Poll reads the items of ids (one BatchGetItem per 100) until check returns done. Its callers
// poll for an agent's answer to a write they have just made and rung, which takes an agent at
// least a read of its own: so the first read is not at once but after interval/4, and the wait
// grows by half each time up to interval (jittered): a quick answer is seen quickly, a slow one
// costs few reads. check may plan the next read instead (next above zero: after next, at most
// interval, and the growth starts again from interval/4 after it), when it knows when the answers
// are due. It honours ctx (give it the deadline). Items that do not exist are absent from the map
// check gets. A failed read is retried at the next tick; the last error is returned if ctx ends
// first.
func (s *Store) Poll(ctx context.Context, ids []string, interval time.Duration, check func(map[string]*Instance) (done bool, next time.Duration)) error {
	if interval <= 0 {
		return fmt.Errorf("poll: interval %s: want more than 0", interval)
	}
	var lastErr error
	backoff := wait.Backoff{Initial: FirstPollWait(interval), Max: interval, Factor: 1.5}
	if err := backoff.Sleep(ctx); err != nil {
		return err
	}
	for {
		items, err := s.GetMany(ctx, ids)
		if errors.Is(err, ErrBadItem) {
			err = nil // the items left out are not readable this time; the rest are
		}
		delay := time.Duration(0)
		if err == nil {
			lastErr = nil
			done, next := check(items)
			if done {
				return nil
			}
			delay = min(next, interval)
		} else {
			lastErr = err
		}
		if delay > 0 {
			backoff.Reset()
		} else {
			delay = backoff.Next()
		}
		if err := wait.Sleep(ctx, delay); err != nil {
			if lastErr != nil {
				return fmt.Errorf("%w (last read: %w)", err, lastErr)
			}
			return err
		}
	}
}
