package release_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/steps/release"
)

// These two tests run against the local emulators with real agent processes
// (internal/testkit/localenv); go test -short skips them. Each is about what no fake can stand
// for: TestReleaseByItemsAlone, the step's own wiring (step.Wiring.ReleaseRun) finding the run's
// items in the table by the stack's name alone, with SSM out of reach; and
// TestReleaseWithRealAgents, the ring, the agent's DEREGISTERED and the runner's deletion with a
// real agent and the GitHub stand-in. Every other test runs release on the in-memory fakes
// (orchestration_test.go).

// env is one end-to-end test's world.
type env struct {
	*localenv.Env
	t   *testing.T
	ctx context.Context
}

func newEnv(t *testing.T, agentArgs ...string) *env {
	t.Helper()
	testbed.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	le, err := localenv.Start(ctx, localenv.Options{Stack: testbed.Name(t, "rel"), Baked: true, AgentArgs: append([]string{"--poll-interval", "250ms"}, agentArgs...)})
	require.NoError(t, err)
	t.Cleanup(le.Close)
	return &env{Env: le, t: t, ctx: ctx}
}

// running brings up an instance serving run, as provision leaves it.
func (e *env) running(run string) *state.Instance {
	e.t.Helper()
	id, err := e.Launch(e.ctx, time.Time{})
	require.NoError(e.t, err)
	idle, err := e.Warm(e.ctx, id)
	require.NoError(e.t, err)
	claimed, err := e.Claim(e.ctx, idle, run)
	require.NoError(e.t, err)
	reg, err := e.WaitSignal(e.ctx, id, state.SignalRegistered, run, claimed.Version)
	require.NoError(e.t, err)
	in, err := e.Transition(e.ctx, state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: reg.Version, RunID: run})
	require.NoError(e.t, err)
	return in
}

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

func (e *env) release(run string, timeout time.Duration) *release.Result {
	e.t.Helper()
	w, err := e.Wiring(nil, quiet)
	require.NoError(e.t, err)
	releaser, _, err := w.Release(e.ctx, release.Config{DeregisterTimeout: timeout})
	require.NoError(e.t, err)
	res, err := releaser.Release(e.ctx, run)
	require.NoError(e.t, err)
	return res
}

// TestReleaseByItemsAlone: a run whose items say how they go back (state.Home, as provision's
// claim writes it) is released without reading the stack's pool documents: with SSM out of
// reach, release finds the table by the stack's name, offers the instance on the queue its item
// names with the pool's idle deadline, and deregisters its runner.
func TestReleaseByItemsAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in := e.running("9201")
	require.True(t, in.Known(), "the claim wrote the way home: %+v", in.Home)

	w, err := e.Wiring(nil, quiet)
	require.NoError(t, err)
	w.Clients.SSM = ssm.NewFromConfig(e.AWS, func(o *ssm.Options) { o.BaseEndpoint = aws.String("http://127.0.0.1:9"); o.RetryMaxAttempts = 1 })
	start := time.Now()
	res, warnings, err := w.ReleaseRun(e.ctx, release.Config{DeregisterTimeout: time.Minute}, "9201")
	require.NoError(t, err)
	require.Empty(t, warnings)
	require.Len(t, res.Instances, 1)
	require.Equal(t, pool.Returned, res.Instances[0].Result, "%+v", res)
	back, err := e.Store.Get(e.ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, state.Idle, back.State)
	require.WithinDuration(t, start.Add(e.Doc.Timeout(state.Idle)), back.Threshold, 30*time.Second, "the pool's idle deadline")
	offered, err := e.Offered(e.ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{in.ID: 1}, offered, "offered once, on the pool's queue")
	require.Empty(t, e.GH.Runners("9201"), "the run's runner is gone")
}

// TestReleaseWithRealAgents: a full cycle on the fleet simulator. The release rings the agent,
// which stops the runner and signals DEREGISTERED; release deletes the run's runner through the
// API (the instance never holds a credential that could) and offers the instance once. Another
// run's runner, and its instance, are untouched.
func TestReleaseWithRealAgents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mine, other := e.running("9501"), e.running("9502")
	mineName, otherName := e.RunnerNames().Name(mine.ID, "9501"), e.RunnerNames().Name(other.ID, "9502")
	require.ElementsMatch(t, []string{mineName, otherName}, runnerNames(e.GH.Runners(localenv.Repo)))

	res := e.release("9501", time.Minute)
	require.Len(t, res.Instances, 1)
	require.Equal(t, pool.Returned, res.Instances[0].Result, "%+v", res.Instances[0])
	require.Equal(t, 1, res.RunnersDeleted, "the run's runner is deleted through the API")
	require.Empty(t, res.Warnings)
	require.Equal(t, []string{otherName}, runnerNames(e.GH.Runners(localenv.Repo)), "the run's runner is gone, the other run's stays")

	back, err := e.Store.Get(e.ctx, mine.ID)
	require.NoError(t, err)
	require.Equal(t, state.Idle, back.State)
	require.True(t, back.SignalFor(state.SignalDeregistered, "9501", back.Version), "its agent stopped the runner: %s", back.SignalLog)
	kept, err := e.Store.Get(e.ctx, other.ID)
	require.NoError(t, err)
	require.Equal(t, state.Running, kept.State)
	require.Equal(t, "9502", kept.RunID)
	offered, err := e.Offered(e.ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{mine.ID: 1}, offered)
}

func runnerNames(rs []ghfake.Runner) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Name)
	}
	return out
}
