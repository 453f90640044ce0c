package agent

import (
	"math/rand/v2"
	"time"
)

// jitter returns d spread over [d/2, d], so that many agents backing off together do not retry
// in step.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}
