package main_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/operator"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
	"github.com/hangar-ci/hangar/pkg/steps/release"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
)

// TestDrain: a pool drained while a run holds one of its instances (real agents): its idle
// instances end at once; the run's instance finishes the run, and its release terminates it
// instead of offering it; nothing is offered meanwhile; undrain opens the pool again.
func TestDrain(t *testing.T) {
	t.Parallel()
	testbed.Require(t)
	startCtx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e, err := localenv.Start(startCtx, localenv.Options{Stack: testbed.Name(t, "drain"), Baked: true})
	require.NoError(t, err)
	defer e.Close()
	w := &world{e: e}
	ctx := testbed.Context(t, 5*time.Minute)
	dir := &offers.Directory{Loader: &pooldoc.Loader{SSM: ssm.NewFromConfig(e.AWS), Stack: e.Stack}, SQS: sqs.NewFromConfig(e.AWS)}

	var idle []string
	for range 2 {
		id, err := e.Launch(ctx, time.Time{})
		require.NoError(t, err)
		in, err := e.Warm(ctx, id)
		require.NoError(t, err)
		require.NoError(t, dir.Publish(ctx, in))
		idle = append(idle, id)
	}
	id, err := e.Launch(ctx, time.Time{})
	require.NoError(t, err)
	in, err := e.Warm(ctx, id)
	require.NoError(t, err)
	claimed, err := e.Claim(ctx, in, "800")
	require.NoError(t, err)
	reg, err := e.WaitSignal(ctx, id, state.SignalRegistered, "800", claimed.Version)
	require.NoError(t, err)
	_, err = e.Transition(ctx, state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: reg.Version, RunID: "800"})
	require.NoError(t, err)

	code, out, errOut := w.hangar(t, nil, "drain", e.Pool, "-o", "json")
	require.Equal(t, 0, code, errOut)
	var rep operator.DrainReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.True(t, rep.Drained)
	require.ElementsMatch(t, idle, rep.Retired, "the idle instances end at once")
	require.Equal(t, []string{id}, rep.Serving, "the run's instance finishes its run")
	for _, x := range idle {
		it, err := e.Store.Get(ctx, x)
		require.NoError(t, err)
		require.Equal(t, state.Terminated, it.State)
		require.Equal(t, "its pool is drained", it.StateReason)
	}
	it, err := e.Store.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, state.Running, it.State, "running work is left to finish")
	require.Equal(t, "its pool is drained", it.Retire, "marked: whoever gives it back ends it, by its item alone")
	require.Equal(t, reg.Version+1, it.Version, "the mark moves no version: the run's own writes still hold")

	code, out, errOut = w.hangar(t, nil, "status", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var status struct{ Pools []operator.PoolStatus }
	require.NoError(t, json.Unmarshal([]byte(out), &status))
	st := status.Pools
	require.True(t, st[0].Drained)
	require.Equal(t, 1, st[0].Running)
	require.Zero(t, st[0].Idle)

	// The run ends: its release terminates the instance instead of offering it.
	wiring, err := e.Wiring(nil, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	require.NoError(t, err)
	releaser, _, err := wiring.Release(ctx, release.Config{})
	require.NoError(t, err)
	res, err := releaser.Release(ctx, "800")
	require.NoError(t, err)
	require.Len(t, res.Instances, 1)
	require.Equal(t, pool.Terminated, res.Instances[0].Result)
	require.Equal(t, "its pool is drained", res.Instances[0].Reason)
	offered, err := e.Offered(ctx)
	require.NoError(t, err)
	require.Empty(t, offered, "nothing of a drained pool is offered")

	code, out, errOut = w.hangar(t, nil, "undrain", e.Pool)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "open to reuse again")
	doc, err := pooldoc.Load(ctx, ssm.NewFromConfig(e.AWS), e.Stack, e.Pool)
	require.NoError(t, err)
	require.False(t, doc.Drained)
	require.Equal(t, e.Doc.SpecHash, doc.SpecHash, "the rest of the document is as it was")

	code, _, errOut = w.hangar(t, nil, "drain", "gpu")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `pool "gpu": no such pool in stack `+e.Stack)
}
