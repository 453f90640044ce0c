package dispatch_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// world is a local world serving label-routed jobs.
type world struct {
	*localenv.Env
	t    *testing.T
	ctx  context.Context
	jobs *localenv.Jobs
	ec2  *fake.RecordedEC2
}

// labels are the labels of the world's jobs: they name its pool.
var labels = []string{"self-hosted", "hangar", "linux-x64"}

func newWorld(t *testing.T, timeout time.Duration, o localenv.JobsOptions) *world {
	t.Helper()
	testbed.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	le, err := localenv.Start(ctx, localenv.Options{Stack: testbed.Name(t, "jobs"), Baked: true,
		AgentArgs: []string{"--poll-interval", "250ms"}})
	require.NoError(t, err)
	w := &world{Env: le, t: t, ctx: ctx}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	o.EC2 = func(c awsapi.EC2) awsapi.EC2 { w.ec2 = fake.Record(c); return w.ec2 }
	w.jobs, err = le.ServeJobs(ctx, o)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, id := range w.Sim.Running() {
				t.Logf("agent log of %s:\n%s", id, tail(w.Sim.AgentLog(id), 4000))
			}
		}
		le.Close()
	})
	return w
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// queue queues n jobs of repo and waits until the webhook has accepted each (the dispatcher may
// be paused meanwhile: they are then all on the jobs queue).
func (w *world) queue(repo string, n int, command string) []int64 {
	w.t.Helper()
	var ids []int64
	for i := range n {
		ids = append(ids, w.jobs.QueueJob(repo, int64(5000+i), labels, command))
	}
	w.accepted(ids, "queued")
	return ids
}

// accepted waits until the webhook answered 202 to action's delivery of every job of ids.
func (w *world) accepted(ids []int64, action string) {
	w.t.Helper()
	want := map[int64]bool{}
	for _, id := range ids {
		want[id] = true
	}
	require.NoError(w.t, localenv.Eventually(w.ctx, time.Minute, fmt.Sprintf("%d %s deliveries accepted", len(ids), action),
		func(context.Context) (bool, error) {
			n := 0
			for _, d := range w.GH.Deliveries() {
				if d.Action == action && want[d.JobID] && d.Status == 202 {
					n++
				}
			}
			return n >= len(ids), nil
		}))
}

// ran waits for every job of ids to complete and returns them.
func (w *world) ran(ids []int64, timeout time.Duration) []ghfake.Job {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.ctx, timeout)
	defer cancel()
	var out []ghfake.Job
	for _, id := range ids {
		j, err := w.GH.WaitJob(ctx, id)
		require.NoError(w.t, err)
		out = append(out, j)
	}
	return out
}

// launched counts the instances the dispatcher's CreateFleets launched.
func (w *world) launched() int {
	n := 0
	for _, c := range w.ec2.Fleets() {
		n += int(c)
	}
	return n
}

// instanceOf returns the instance whose runner ran a job.
func (w *world) instanceOf(j ghfake.Job) string {
	w.t.Helper()
	id, key, ok := w.RunnerNames().Parse(j.RunnerName)
	require.True(w.t, ok, "job %d ran on %q, not a runner of the stack", j.ID, j.RunnerName)
	require.True(w.t, names.IsJobKey(key), j.RunnerName)
	return id
}

// settled waits until the pool has n idle instances, each wiped (DEREGISTERED for the job it
// served) and offered, none holding a job, and no runner of the stack is left on GitHub; it
// returns the idle instances.
func (w *world) settled(n int, timeout time.Duration) []state.Instance {
	w.t.Helper()
	var idle []state.Instance
	depth := -1
	require.NoError(w.t, localenv.Eventually(w.ctx, timeout, fmt.Sprintf("%d idle instances, wiped, and no runner left", n),
		func(ctx context.Context) (bool, error) {
			var err error
			if idle, err = w.Store.InPoolState(ctx, w.Pool, state.Idle); err != nil {
				return false, err
			}
			for _, st := range []state.State{state.Claimed, state.Running, state.Created} {
				busy, err := w.Store.InPoolState(ctx, w.Pool, st)
				if err != nil || len(busy) > 0 {
					return false, err
				}
			}
			for _, it := range idle {
				if it.Signal != state.SignalDeregistered || it.SignalRun != it.LastRunID {
					return false, nil
				}
			}
			if len(idle) != n || len(w.ourRunners()) > 0 {
				return false, nil
			}
			depth, err = w.depth(ctx)
			return depth == n, err // each offered: its agent's return handled
		}), "idle %d, offers %d, runners %v", len(idle), depth, w.ourRunners())
	return idle
}

// depth counts the pool's offers.
func (w *world) depth(ctx context.Context) (int, error) {
	q, err := offers.NewQueue(sqs.NewFromConfig(w.AWS), w.Pool, w.Doc.QueueURL, w.Doc.DeadLetterQueueURL)
	if err != nil {
		return 0, err
	}
	return q.Depth(ctx)
}

// ourRunners returns the stack's runners registered on GitHub.
func (w *world) ourRunners() []string {
	var out []string
	for _, r := range w.GH.Runners("") {
		if strings.HasPrefix(r.Name, w.RunnerNames().Prefix()) {
			out = append(out, r.Name+" ("+r.Status+")")
		}
	}
	return out
}

// offeredOnce checks that each of the idle instances is offered exactly once, and nothing else.
// It hides the offers for a minute (localenv.Env.Offered): call it last.
func (w *world) offeredOnce(idle []state.Instance) {
	w.t.Helper()
	offered, err := w.Offered(w.ctx)
	require.NoError(w.t, err)
	want := map[string]int{}
	for _, it := range idle {
		want[it.ID] = 1
	}
	require.Equal(w.t, want, offered, "every idle instance offered once, and nothing else")
}
