package pool

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestFirstReadBoundedByTheTimeout: the first read, planned on the agents' own reports
// (state.Deregistration), comes at most half the deregister timeout after the ring.
func TestFirstReadBoundedByTheTimeout(t *testing.T) {
	t.Parallel()
	waiting := []*releasing{{inst: state.Instance{Report: state.Report{DeregisterMs: 5000}}}}
	short := &giving{gb: GiveBack{PollInterval: 200 * time.Millisecond, DeregisterTimeout: 2 * time.Second}}
	require.Equal(t, time.Second, short.firstRead(waiting))
	long := &giving{gb: GiveBack{PollInterval: 200 * time.Millisecond, DeregisterTimeout: 2 * time.Minute}}
	require.Equal(t, state.MaxPlannedRead, long.firstRead(waiting))
}
