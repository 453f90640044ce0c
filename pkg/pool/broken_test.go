package pool_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// TestBrokenImageStopsLaunches: an instance retired because its agent failed the image contract
// marks its spec broken; no creation of that spec follows, warm fill or run or job, each refused
// with the reason; a deploy that changes the spec launches again.
func TestBrokenImageStopsLaunches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := fake.NewWorld(t, fake.Pool(t, "linux", nil))
	failed := *w.AddIdle(t, fake.Idle{})
	failed.SpecHash = w.Doc.SpecHash
	failed.Signal, failed.SignalLog = state.SignalFailed,
		"hangar-agent: "+state.ImageContractFailure+` (docs/configuration.md, "The image"): git: actions/checkout and the runner fetch repositories with it`
	other := *w.AddIdle(t, fake.Idle{})
	other.Signal, other.SignalLog = state.SignalFailed, "hangar-agent: a pre-runner script failed"
	res := w.Pool.Retire(ctx, []state.Instance{failed, other}, pool.Because("its agent failed"))
	require.NoError(t, res.Err)
	require.Len(t, res.Ended, 2)
	b, err := w.Store.Broken(ctx, "linux")
	require.NoError(t, err)
	require.NotNil(t, b, "the image contract's failure marks the spec")
	require.Equal(t, w.Doc.SpecHash, b.Spec)
	require.Contains(t, b.Reason, "git: actions/checkout")

	n, err := w.Pool.Warm(ctx, w.Doc, 2, time.Now(), "warm-"+t.Name(), time.Now().Add(time.Minute))
	require.ErrorIs(t, err, pool.ErrImageBroken)
	require.ErrorContains(t, err, "git: actions/checkout")
	require.Zero(t, n)
	for _, d := range doors {
		req, _ := d.ask(t, w, 1, "octo/app")
		acq := acquire(t, w, req)
		require.ErrorIs(t, acq.CreateErr, pool.ErrImageBroken, d.name)
		require.Empty(t, acq.Created, d.name)
	}
	require.Zero(t, w.EC2.Calls("CreateFleet"), "nothing of the broken spec launched")

	// A deploy fixes the image: its new spec launches.
	w.Doc.SpecHash = "fixed0123456789a"
	n, err = w.Pool.Warm(ctx, w.Doc, 2, time.Now(), "warm-fixed-"+t.Name(), time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, 2, n)
}
