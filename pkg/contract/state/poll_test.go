package state_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestPollPlannedRead: against DynamoDB Local, a check that plans the next read is read again no
// sooner than it planned (the backoff's first step would be a quarter of the interval at most),
// and a plan beyond the interval is cut to it (else the hour would outlast the test's deadline);
// a check that plans nothing is read again on the backoff, after at least its first jittered step
// (an eighth of the interval), not at once.
func TestPollPlannedRead(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	in := create(t, s, "")
	const interval = 400 * time.Millisecond
	tests := []struct {
		name     string
		plan     time.Duration
		min, max time.Duration // the second read's distance from the first
	}{
		{"planned", 300 * time.Millisecond, 300 * time.Millisecond, 10 * time.Second},
		{"cut to the interval", time.Hour, 0, 10 * time.Second},
		{"not planned: the backoff", 0, interval / 8, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var reads []time.Time
			err := s.Poll(testbed.Context(t, 30*time.Second), []string{in.ID}, interval, func(items map[string]*state.Instance) (bool, time.Duration) {
				require.Contains(t, items, in.ID)
				reads = append(reads, time.Now())
				return len(reads) == 2, tt.plan
			})
			require.NoError(t, err)
			require.Len(t, reads, 2)
			gap := reads[1].Sub(reads[0])
			require.GreaterOrEqual(t, gap, tt.min)
			require.Less(t, gap, tt.max)
		})
	}
}
