package state

import (
	"time"

	"github.com/hangar-ci/hangar/pkg/platform/wait"
)

// unprocessedBackoff is the wait between the attempts of a partial batch (unprocessed keys).
func unprocessedBackoff() wait.Backoff {
	return wait.Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second}
}
