package state

import (
	"context"
	"time"

	"github.com/hangar-ci/hangar/pkg/wait"
)

// backoff waits a jittered, capped exponential delay before attempt+1 of a partial batch
// (unprocessed keys), or returns ctx's error.
func backoff(ctx context.Context, attempt int) error {
	return wait.Sleep(ctx, wait.Jitter(min(50*time.Millisecond<<min(attempt, 6), 2*time.Second)))
}
