package release_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/hangar-ci/hangar/internal/testkit/faults"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/platform/ghclient"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
	"github.com/hangar-ci/hangar/pkg/steps/release"
)

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

// TestStragglerTerminated: an agent that cannot see the release does not deregister; its
// instance is terminated when the deadline passes and its runner is deleted through the API.
func TestStragglerTerminated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	good, stuck := e.running("9001"), e.running("9001")
	require.NoError(t, e.Sim.SetDynamoDB(stuck.ID, false))

	res := e.release("9001", 4*time.Second)
	outcomes := map[string]pool.Outcome{}
	for _, o := range res.Instances {
		outcomes[o.ID] = o
	}
	require.Equal(t, pool.Returned, outcomes[good.ID].Result)
	require.Equal(t, pool.Terminated, outcomes[stuck.ID].Result)
	require.Contains(t, outcomes[stuck.ID].Reason, "did not deregister within 4s")
	require.Positive(t, outcomes[good.ID].HeldSeconds, "how long the run held it")
	require.False(t, outcomes[good.ID].PriceKnown, "launched without a price: unknown, not guessed")
	require.Zero(t, outcomes[good.ID].Cost)

	// Each instance's service to the run is on record: both were given back (the run ended
	// there); the stuck one was terminated after, and its item, kept as history, says why.
	recs, err := e.Store.RunRecords(e.ctx, e.Pool, time.Now().Add(-time.Hour), time.Now().Add(time.Minute))
	require.NoError(t, err)
	byID := map[string]state.RunRecord{}
	for _, r := range recs {
		byID[r.InstanceID] = r
	}
	require.Len(t, byID, 2)
	for _, id := range []string{good.ID, stuck.ID} {
		require.Equal(t, "idle", byID[id].Outcome)
		require.Equal(t, "9001", byID[id].Run)
		require.Equal(t, "released by run 9001", byID[id].Reason)
	}
	ended, err := e.Store.Ended(e.ctx, e.Pool, time.Now().Add(-time.Hour), time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Len(t, ended, 1)
	require.Equal(t, stuck.ID, ended[0].ID)
	require.Contains(t, ended[0].StateReason, "did not deregister within 4s")
	require.Equal(t, 2, res.RunnersDeleted, "both runners are deleted through the API, the stuck instance's too")
	require.Empty(t, e.GH.Runners(""))
	st, err := e.InstanceState(e.ctx, stuck.ID)
	require.NoError(t, err)
	require.Contains(t, []string{"terminated", "shutting-down"}, string(st))
	it, err := e.Store.Get(e.ctx, stuck.ID)
	require.NoError(t, err)
	require.Equal(t, state.Terminated, it.State)
}

// TestInstanceAlreadyGone: an instance refresh already terminated is skipped; a stray runner
// with the run's label is removed; release succeeds without warnings.
func TestInstanceAlreadyGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in := e.running("9101")
	_, err := e.Transition(e.ctx, state.Change{InstanceID: in.ID, From: state.Running, To: state.Terminated, Version: in.Version, RunID: "9101"})
	require.NoError(t, err)

	res := e.release("9101", 10*time.Second)
	require.Empty(t, res.Instances, "a terminated instance no longer holds the run")
	require.Equal(t, 1, res.RunnersDeleted, "its runner, left registered, is removed")
	require.Empty(t, e.GH.Runners(""))
	require.Empty(t, res.Warnings)
}

// TestStragglerTakenMeanwhileIsNotTerminated: a straggler that never deregisters is taken by
// another run between release's read and its write; release's write loses and the instance is
// left to the run that holds it, not terminated.
func TestStragglerTakenMeanwhileIsNotTerminated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stuck := e.running("9201")
	require.NoError(t, e.Sim.SetDynamoDB(stuck.ID, false))

	thief := &faults.Thief{Store: e.Store, Target: stuck.ID, Run: "9299"}
	owner, name, _ := strings.Cut(localenv.Repo, "/")
	gh, err := ghclient.New(e.GH.URL(), localenv.AdminToken, ghapi.Scope{Owner: owner, Repo: name})
	require.NoError(t, err)
	dir := &offers.Directory{Loader: &pooldoc.Loader{SSM: ssm.NewFromConfig(e.AWS), Stack: e.Stack}, SQS: sqs.NewFromConfig(e.AWS)}
	releaser, err := release.New(release.Config{DeregisterTimeout: 3 * time.Second},
		release.Deps{Pool: &pool.Pool{Stack: e.Stack, Store: thief, EC2: e.EC2, Queues: dir, Log: quiet}, GitHub: gh, Runners: e.RunnerNames(), Log: quiet})
	require.NoError(t, err)
	res, err := releaser.Release(e.ctx, "9201")
	require.NoError(t, err)

	stolen, err := thief.Stolen()
	require.NoError(t, err)
	require.True(t, stolen)
	require.Len(t, res.Instances, 1)
	require.Equal(t, pool.Already, res.Instances[0].Result, "the instance is the other run's now")
	it, err := e.Store.Get(e.ctx, stuck.ID)
	require.NoError(t, err)
	require.Equal(t, state.Claimed, it.State)
	require.Equal(t, "9299", it.RunID)
	st, err := e.InstanceState(e.ctx, stuck.ID)
	require.NoError(t, err)
	require.Equal(t, "running", string(st), "a lost write never reaches TerminateInstances")
}

// TestCleaningFailureTerminates: an agent that cannot clean up after the run (here, one of its
// temporary directories is replaced by a file while the run goes on) signals FAILED instead of
// DEREGISTERED; release terminates the instance instead of offering it.
func TestCleaningFailureTerminates(t *testing.T) {
	t.Parallel()
	tmp, err := os.MkdirTemp("", "hangar-tmp-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	e := newEnv(t, "--tmp-dirs", "/tmp,"+tmp)
	in := e.running("9401")
	require.NoError(t, os.Remove(tmp))
	require.NoError(t, os.WriteFile(tmp, []byte("not a directory"), 0o644))

	res := e.release("9401", time.Minute)
	require.Len(t, res.Instances, 1)
	require.Equal(t, pool.Terminated, res.Instances[0].Result)
	require.Contains(t, res.Instances[0].Reason, "its agent reported FAILED")
	it, err := e.Store.Get(e.ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, state.Terminated, it.State)
	require.Contains(t, it.SignalLog, "cleaning up after run 9401 failed")
	st, err := e.InstanceState(e.ctx, in.ID)
	require.NoError(t, err)
	require.Contains(t, []string{"terminated", "shutting-down"}, string(st))
	offers, err := e.Offered(e.ctx)
	require.NoError(t, err)
	require.NotContains(t, offers, in.ID, "an instance that may hold traces of a run is never offered")
}

// TestUnacknowledgedClaimReturnedAtOnce: a claim its agent has not yet noticed (the provision
// that made it was killed before ringing, say) is given back and offered at once rather than
// waited on for a deregistration that cannot come, and the agent, when it reads its item again,
// never serves the run.
func TestUnacknowledgedClaimReturnedAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, err := e.Launch(e.ctx, time.Time{})
	require.NoError(t, err)
	idle, err := e.Warm(e.ctx, id)
	require.NoError(t, err)
	require.NoError(t, e.Sim.SetDynamoDB(id, false)) // the agent cannot notice the claim
	claimed, err := e.Claim(e.ctx, idle, "9101")
	require.NoError(t, err)

	res := e.release("9101", 2*time.Minute)
	require.Len(t, res.Instances, 1)
	require.Equal(t, pool.Returned, res.Instances[0].Result, "%+v", res.Instances[0])
	require.Less(t, res.Took, time.Minute, "not waited on for a deregistration")
	back, err := e.Store.Get(e.ctx, id)
	require.NoError(t, err)
	require.Equal(t, state.Idle, back.State)
	require.Equal(t, claimed.Version+1, back.Version)
	require.Contains(t, back.StateReason, "before its agent took the claim")

	// The agent reads its item again (its heartbeat moves on) and leaves the run alone.
	require.NoError(t, e.Sim.SetDynamoDB(id, true))
	_, err = e.WaitItem(e.ctx, id, 2*time.Minute, "a heartbeat after the release", func(in *state.Instance) bool {
		return in.HeartbeatAt.After(back.UpdatedAt)
	})
	require.NoError(t, err)
	it, err := e.Store.Get(e.ctx, id)
	require.NoError(t, err)
	require.Equal(t, state.Idle, it.State)
	require.Less(t, it.AckVersion, claimed.Version, "the claim was never acknowledged")
	require.NotEqual(t, "9101", it.SignalRun, "no signal about the run")
	require.Empty(t, e.GH.Runners("9101"), "no runner registered for the run")
	offered, err := e.Offered(e.ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{id: 1}, offered, "offered once, at once")
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
