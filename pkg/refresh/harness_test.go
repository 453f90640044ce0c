package refresh_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/faults"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/internal/wire/refreshwire"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/refresh"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
)

type env struct {
	*localenv.Env
	t       *testing.T
	ctx     context.Context
	metrics testbed.Buffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	testbed.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	le, err := localenv.Start(ctx, localenv.Options{Stack: testbed.Name(t, "refresh"), Baked: true, AgentArgs: []string{"--poll-interval", "250ms"}})
	require.NoError(t, err)
	e := &env{Env: le, t: t, ctx: ctx}
	t.Cleanup(func() {
		if t.Failed() {
			for _, id := range e.Sim.Running() {
				t.Logf("agent log of %s:\n%s", id, e.Sim.AgentLog(id))
			}
		}
		le.Close()
	})
	return e
}

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

// refresh runs one refresh of the stack, as the Lambda does.
func (e *env) refresh(cfg refresh.Config) *refresh.Report {
	e.t.Helper()
	stack, deps := e.load()
	cfg.Stack, cfg.Pools = e.Stack, stack.Pools
	rep, err := refresh.Run(e.ctx, cfg, deps)
	require.NoError(e.t, err)
	require.Empty(e.t, rep.Errors)
	return rep
}

func (e *env) schedule(hot, stopped int) {
	e.t.Helper()
	require.NoError(e.t, e.UpdatePool(e.ctx, func(d *pooldoc.Document) {
		d.Warm = pooldoc.Warm{Schedules: []pooldoc.Schedule{{Name: "default", Hot: hot, Stopped: stopped}}}
	}))
}

// inState returns the pool's instances in a state.
func (e *env) inState(st state.State) []state.Instance {
	e.t.Helper()
	out, err := e.Store.InPoolState(e.ctx, e.Pool, st)
	require.NoError(e.t, err)
	return out
}

// waitReady waits for every warming instance's READY.
func (e *env) waitReady() {
	e.t.Helper()
	for _, in := range e.inState(state.Created) {
		_, err := e.WaitSignal(e.ctx, in.ID, state.SignalReady, "", 1)
		require.NoError(e.t, err)
	}
}

func (e *env) provision(run string, n int) *provision.Result {
	e.t.Helper()
	w, err := e.Wiring(nil, quiet)
	require.NoError(e.t, err)
	deps, err := w.Provision(e.ctx, e.Pool)
	require.NoError(e.t, err)
	res, err := provision.Run(e.ctx, provision.Config{Stack: e.Stack, Pool: e.Pool, Count: n, RunID: run, RunAttempt: 1,
		Repository: localenv.Repo, ServerURL: e.GH.URL(), RegistrationTimeout: time.Minute}, deps)
	require.NoError(e.t, err)
	return res
}

func ids(insts []state.Instance) []string {
	out := make([]string, len(insts))
	for i, in := range insts {
		out[i] = in.ID
	}
	return out
}

// load reads the stack as the Lambda does for each refresh.
func (e *env) load() (*pooldoc.Stack, refresh.Deps) {
	e.t.Helper()
	w := refreshwire.New(e.AWS, e.Stack, refreshwire.Options{Log: quiet, Metrics: &e.metrics,
		DynamoDB: []func(*dynamodb.Options){func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true }}})
	stack, deps, err := w.Load(e.ctx)
	require.NoError(e.t, err)
	return stack, deps
}

func (e *env) refreshDeps() refresh.Deps {
	e.t.Helper()
	_, deps := e.load()
	return deps
}

// refreshRacingAClaim runs one refresh under which run claims instance id just before refresh's
// first write moving it to before (terminated when empty), as a provision could between
// refresh's read and its write. It checks that the claim happened and that afterwards the
// instance is still claimed by run and running on EC2, and returns the report.
func (e *env) refreshRacingAClaim(id, run string, before state.State) *refresh.Report {
	e.t.Helper()
	stack, deps := e.load()
	thief := &faults.Thief{Store: e.Store, Target: id, Run: run, Before: before}
	deps.Store = thief
	rep, err := refresh.Run(e.ctx, refresh.Config{Stack: e.Stack, Pools: stack.Pools}, deps)
	require.NoError(e.t, err)
	stolen, err := thief.Stolen()
	require.NoError(e.t, err)
	require.True(e.t, stolen, "the claim landed between refresh's read and its write")

	it, err := e.Store.Get(e.ctx, id)
	require.NoError(e.t, err)
	require.Equal(e.t, state.Claimed, it.State)
	require.Equal(e.t, run, it.RunID)
	st, err := e.InstanceState(e.ctx, id)
	require.NoError(e.t, err)
	require.Equal(e.t, ec2types.InstanceStateNameRunning, st, "the claimed instance keeps running: a lost write never reaches EC2")
	return rep
}
