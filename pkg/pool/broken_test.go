package pool_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// warming adds a warm instance still being created (a warm fill's, no run ever), whose agent
// signalled FAILED with log.
func warming(t *testing.T, w *fake.World, log string) state.Instance {
	t.Helper()
	in := &state.Instance{ID: fmt.Sprintf("i-%017x", 0xb0e0000000+warmSeq.Add(1)), Pool: w.Doc.Name, Threshold: time.Now().Add(time.Hour),
		LaunchedAt: time.Now(), Spec: state.Spec{InstanceType: w.Doc.InstanceTypes[0], SpecHash: w.Doc.SpecHash}, Home: w.Doc.Home()}
	require.NoError(t, w.Store.Create(context.Background(), []*state.Instance{in}))
	got, err := w.Store.Get(context.Background(), in.ID)
	require.NoError(t, err)
	got.Signal, got.SignalLog = state.SignalFailed, log
	return *got
}

var warmSeq atomic.Int64

// TestBrokenImageStopsLaunches: a warm instance, which never held a run, retired because its
// agent failed the image contract marks its spec broken; no creation of that spec follows, warm
// fill or run or job, each refused with the reason; a deploy that changes the spec launches
// again. The same failure written on an instance that held a run (where a job could have written
// it with the instance's credentials), or a log that only mentions the phrase, marks nothing.
func TestBrokenImageStopsLaunches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := fake.NewWorld(t, fake.Pool(t, "linux", nil))
	contract := "hangar-agent: " + state.ImageContractFailure + ` (docs/configuration.md, "The image"): git: actions/checkout and the runner fetch repositories with it`
	served := *w.AddIdle(t, fake.Idle{Served: []string{"octo/app"}, LastRun: "101"})
	served.SpecHash = w.Doc.SpecHash
	served.Signal, served.SignalLog = state.SignalFailed, contract
	mentions := warming(t, w, "hangar-agent: remove /tmp/"+state.ImageContractFailure+": device busy")
	res := w.Pool.Retire(ctx, []state.Instance{served, mentions}, pool.Because("its agent failed"))
	require.NoError(t, res.Err)
	require.Len(t, res.Ended, 2)
	b, err := w.Store.Broken(ctx, "linux")
	require.NoError(t, err)
	require.Nil(t, b, "neither a served instance's failure nor a log that only names the phrase marks the spec")

	failed := warming(t, w, "installing\n"+contract)
	other := warming(t, w, "hangar-agent: a pre-runner script failed")
	res = w.Pool.Retire(ctx, []state.Instance{failed, other}, pool.Because("its agent failed"))
	require.NoError(t, res.Err)
	require.Len(t, res.Ended, 2)
	b, err = w.Store.Broken(ctx, "linux")
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
