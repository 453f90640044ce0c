package release

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestFirstRead: release first reads its items about as long after the ring as their agents
// took to deregister last time, and polls from the ring when one never reported it.
func TestFirstRead(t *testing.T) {
	g := &giving{Releaser: &Releaser{cfg: Config{PollInterval: 200 * time.Millisecond, DeregisterTimeout: 2 * time.Minute}}}
	waiting := func(ms ...int64) []*releasing {
		var out []*releasing
		for _, m := range ms {
			out = append(out, &releasing{inst: state.Instance{Report: state.Report{DeregisterMs: m}}})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		ms   []int64
		want time.Duration
	}{
		{"one agent, 100 ms last time: 110 ms + the 60 ms margin, less the poll's own 50 ms", []int64{100}, 120 * time.Millisecond},
		{"the median of several", []int64{100, 400, 200}, 220*time.Millisecond + firstReadMargin - 50*time.Millisecond},
		{"the upper median of an even count", []int64{100, 400, 200, 300}, 330*time.Millisecond + firstReadMargin - 50*time.Millisecond},
		{"one never reported: poll from the ring", []int64{300, 0}, 0},
		{"a quick agent: the margin, less the poll's first wait", []int64{5}, 5500*time.Microsecond + firstReadMargin - 50*time.Millisecond},
		{"an agent that says an hour waits at most 2 s", []int64{3_600_000}, maxFirstRead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, g.firstRead(waiting(tc.ms...)))
		})
	}
	short := &giving{Releaser: &Releaser{cfg: Config{PollInterval: 200 * time.Millisecond, DeregisterTimeout: 2 * time.Second}}}
	require.Equal(t, time.Second, short.firstRead(waiting(5000)), "at most half the deregister timeout")
}
