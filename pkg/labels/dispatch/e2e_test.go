package dispatch_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/platform/ghclient"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// TestBurst: 20 jobs on an empty pool are served by 20 instances created with one CreateFleet;
// then 50 jobs queued at once over the 20 instances, now idle: each job runs once, on an instance
// of its own (20 claimed, 30 created with one more CreateFleet; on a slow machine an instance may
// finish its job and be offered again before the batch is placed, and take a second job instead
// of a new instance); at the end every instance is idle, wiped, offered once, and no runner of the
// stack is left on GitHub.
func TestBurst(t *testing.T) {
	t.Parallel()
	logs := &testbed.Buffer{}
	w := newWorld(t, 12*time.Minute, localenv.JobsOptions{BatchSize: 100, BatchWindow: 2 * time.Second,
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "component=dispatch") && !strings.Contains(l, "msg=\"removed a runner") {
					t.Log(l)
				}
			}
		}
	})

	w.jobs.Pause()
	first := w.queue(localenv.Repo, 20, "echo job $GITHUB_RUN_ID on $RUNNER_NAME")
	w.jobs.Resume()
	for _, j := range w.ran(first, 4*time.Minute) {
		require.Equal(t, "success", j.Conclusion, "job %d: %s", j.ID, j.Output)
	}
	require.Equal(t, []int32{20}, w.ec2.Fleets(), "the empty pool's 20 instances come from one CreateFleet")
	idle := w.settled(20, 3*time.Minute)

	w.jobs.Pause()
	burst := w.queue(localenv.Repo, 50, "sleep 1; echo job on $RUNNER_NAME")
	w.jobs.Resume()
	done := w.ran(burst, 6*time.Minute)
	t.Logf("batches %v, fleets %v", w.jobs.Batches(), w.ec2.Fleets())
	byInstance := map[string][]ghfake.Job{}
	runners := map[string]bool{}
	for _, j := range done {
		require.Equal(t, "success", j.Conclusion, "job %d: %s", j.ID, j.Output)
		require.False(t, runners[j.RunnerName], "job %d: runner %s ran another job too", j.ID, j.RunnerName)
		runners[j.RunnerName] = true
		id := w.instanceOf(j)
		byInstance[id] = append(byInstance[id], j)
	}
	for id, js := range byInstance {
		slices.SortFunc(js, func(a, b ghfake.Job) int { return a.StartedAt.Compare(b.StartedAt) })
		for i := 1; i < len(js); i++ {
			require.False(t, js[i].StartedAt.Before(js[i-1].CompletedAt), "%s held jobs %d and %d at once", id, js[i-1].ID, js[i].ID)
		}
	}
	reused := 0
	for _, it := range idle {
		if _, ok := byInstance[it.ID]; ok {
			reused++
		}
	}
	require.Equal(t, 20, reused, "every idle instance was claimed")
	fleets := w.ec2.Fleets()
	require.Len(t, fleets, 2, "the burst's overflow comes from one CreateFleet")
	require.Equal(t, len(byInstance)-20, int(fleets[1]), "every instance created for the burst ran one of its jobs")
	require.LessOrEqual(t, fleets[1], int32(30), "no more than the overflow was created")

	w.offeredOnce(w.settled(20+int(fleets[1]), 4*time.Minute))
	for _, j := range done {
		again, _ := w.GH.Job(j.ID)
		require.Equal(t, j.RunnerName, again.RunnerName, "job %d ran once", j.ID)
	}
}

// TestDeliveries: a delivery redelivered (same delivery id) or sent again (another id), and a job
// whose completed arrives before its queued, change nothing: one instance per job, no runner left.
func TestDeliveries(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 6*time.Minute, localenv.JobsOptions{})

	// Twice the same queued delivery, and once more under another id: one runner, one instance.
	w.jobs.Pause()
	job := w.queue(localenv.Repo, 1, "echo once")[0]
	first := deliveryOf(t, w, job, "queued")
	require.NoError(t, w.GH.Redeliver(first))
	_, err := w.GH.SendJobEvent(job, "queued")
	require.NoError(t, err)
	statuses := deliveryStatuses(w, job, "queued")
	require.Equal(t, []int{202, 200, 200}, statuses, "the later deliveries are duplicates")
	w.jobs.Resume()
	j := w.ran([]int64{job}, 2*time.Minute)[0]
	require.Equal(t, "success", j.Conclusion)
	require.Equal(t, []int32{1}, w.ec2.Fleets(), "one instance for the job")
	w.settled(1, 2*time.Minute)

	// completed (cancelled) before queued: the late queued delivery places nothing.
	w.GH.DropDeliveries("queued", true)
	late := w.jobs.QueueJob(localenv.Repo, 6001, labels, "echo never")
	w.GH.CancelJob(late)
	w.accepted([]int64{late}, "completed")
	w.GH.DropDeliveries("queued", false)
	require.NoError(t, w.GH.Redeliver(deliveryOf(t, w, late, "queued")))
	w.accepted([]int64{late}, "queued")
	require.NoError(t, localenv.Eventually(w.ctx, time.Minute, "the late job's message handled", func(context.Context) (bool, error) {
		return w.jobs.Pending(w.ctx) == 0, nil
	}))
	idle := w.settled(1, time.Minute)
	require.Equal(t, []int32{1}, w.ec2.Fleets(), "nothing created for the cancelled job")
	require.NotEqual(t, names.JobKey(late, 0), idle[0].LastRunID, "the idle instance never served the cancelled job")
	w.offeredOnce(idle)
}

// TestAgentCrashMidJob: an agent killed mid-job (its runner dies with it; systemd restarts it)
// wipes the instance, which goes back to the pool; GitHub fails the job; the lost runner's
// registration is deleted once GitHub lets go of it. No instance or registration is left.
func TestAgentCrashMidJob(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 6*time.Minute, localenv.JobsOptions{})
	w.GH.SetRunnerLostAfter(2 * time.Second)
	job := w.queue(localenv.Repo, 1, "sleep 120")[0]
	var id string
	require.NoError(t, localenv.Eventually(w.ctx, time.Minute, "the job running", func(ctx context.Context) (bool, error) {
		held, err := w.Store.ByRun(ctx, names.JobKey(job, 0))
		if err != nil || len(held) != 1 {
			return false, err
		}
		id = held[0].ID
		return held[0].State == state.Running, nil
	}))
	require.NoError(t, w.Sim.CrashAgent(w.ctx, id))
	j := w.ran([]int64{job}, 2*time.Minute)[0]
	require.Equal(t, "failure", j.Conclusion, "GitHub fails a job whose runner is lost")
	idle := w.settled(1, 2*time.Minute)
	require.Equal(t, id, idle[0].ID, "the instance is back in the pool, wiped")

	// And it serves the next job.
	next := w.ran(w.queue(localenv.Repo, 1, "echo after"), 2*time.Minute)[0]
	require.Equal(t, "success", next.Conclusion)
	require.Equal(t, id, w.instanceOf(next))
	w.offeredOnce(w.settled(1, 2*time.Minute))
}

func deliveryOf(t *testing.T, w *world, job int64, action string) string {
	t.Helper()
	for _, d := range w.GH.Deliveries() {
		if d.JobID == job && d.Action == action {
			return d.ID
		}
	}
	t.Fatalf("no %s delivery for job %d", action, job)
	return ""
}

func deliveryStatuses(w *world, job int64, action string) []int {
	var out []int
	for _, d := range w.GH.Deliveries() {
		if d.JobID == job && d.Action == action && d.Status != 0 {
			out = append(out, d.Status)
		}
	}
	return slices.Clip(out)
}

// TestRunnerDeletedBeforeItsJob: a job's runner removed from GitHub before it took its job (by a
// sweep, an operator, or GitHub) does not strand the job: the agent tells a runner that never
// took a job from one that finished it and says so (REGISTER_FAILED), the job is placed again on
// a fresh runner and runs, and the instance goes back to the pool.
func TestRunnerDeletedBeforeItsJob(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 6*time.Minute, localenv.JobsOptions{})
	release := w.GH.Hold("/next") // the runners come online but take no job yet
	defer release()
	job := w.queue(localenv.Repo, 1, "echo survived")[0]
	first := names.JobKey(job, 0)
	var victim ghfake.Runner
	require.NoError(t, localenv.Eventually(w.ctx, 3*time.Minute, "the job's runner online", func(context.Context) (bool, error) {
		for _, r := range w.GH.Runners("") {
			if strings.HasSuffix(r.Name, "-"+first) && r.Status == "online" {
				victim = r
				return true, nil
			}
		}
		return false, nil
	}))
	owner, repo, _ := strings.Cut(localenv.Repo, "/")
	_, err := w.GitHub.Actions.RemoveRunner(w.ctx, owner, repo, victim.ID)
	require.NoError(t, err)
	release()

	j := w.ran([]int64{job}, 3*time.Minute)[0]
	require.Equal(t, "success", j.Conclusion, j.Output)
	require.True(t, strings.HasSuffix(j.RunnerName, "-"+names.JobKey(job, 1)), "ran on the runner made when the job was placed again: %s", j.RunnerName)
	idle := w.settled(1, 2*time.Minute)
	require.Zero(t, idle[0].RegisterFailures, "the run that followed cleared the failure")
}

// TestSweepsWhileMinting: the leftover sweep that provision and release run for their scope,
// run over and over while twelve jobs are placed on six warm instances (their runners minted
// before their claims are written), deletes none of the jobs' runners: every job runs once, on a
// runner of the first placement (any of the pool's, as GitHub hands them out), and at the end
// every instance is idle and offered with no runner left.
func TestSweepsWhileMinting(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 8*time.Minute, localenv.JobsOptions{})
	warm := w.queue(localenv.Repo, 6, "true")
	for _, j := range w.ran(warm, 3*time.Minute) {
		require.Equal(t, "success", j.Conclusion, "job %d: %s", j.ID, j.Output)
	}
	w.settled(6, 2*time.Minute)

	owner, repo, _ := strings.Cut(localenv.Repo, "/")
	gh, err := ghclient.New(w.GH.URL(), localenv.AdminToken, ghapi.Scope{Owner: owner, Repo: repo})
	require.NoError(t, err)
	sweeper := &pool.Pool{Stack: w.Stack, Store: w.Store}
	ctx, stop := context.WithCancel(w.ctx)
	var sweeps, deleted atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			n, _ := sweeper.RemoveLeftovers(ctx, gh, w.RunnerNames(), "")
			sweeps.Add(1)
			deleted.Add(int64(n))
			select { // a sweep every few milliseconds: far more often than steps run
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	var burst []int64
	for i := range 12 {
		burst = append(burst, w.jobs.QueueJob(localenv.Repo, int64(7000+i), labels, "sleep 1"))
	}
	done := w.ran(burst, 4*time.Minute)
	stop()
	wg.Wait()
	t.Logf("%d sweeps while the jobs were placed", sweeps.Load())
	require.Positive(t, sweeps.Load())
	require.Zero(t, deleted.Load(), "no runner of a job deleted")
	runners := map[string]bool{}
	for _, j := range done {
		require.Equal(t, "success", j.Conclusion, "job %d: %s", j.ID, j.Output)
		require.False(t, runners[j.RunnerName], "job %d: runner %s ran another job too", j.ID, j.RunnerName)
		runners[j.RunnerName] = true
		_, key, ok := w.RunnerNames().Parse(j.RunnerName)
		require.True(t, ok, j.RunnerName)
		_, again, _ := names.ParseJobKey(key)
		require.Zero(t, again, "job %d: no job had to be placed again (%s)", j.ID, j.RunnerName)
	}
	w.offeredOnce(w.settled(w.launched(), 3*time.Minute))
}

// TestOrganizationScopeTwoRepositories: two repositories of one organisation share an
// organisation-scoped pool; their jobs, queued at once, each run once and succeed, each on a
// runner in a group the dispatcher made open to the job's repository alone, so that GitHub never
// hands one repository's job to the other's runner (which would fail it).
func TestOrganizationScopeTwoRepositories(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 8*time.Minute, localenv.JobsOptions{Scope: pooldoc.JobScopeOrganization, BatchSize: 20, BatchWindow: time.Second})
	second := localenv.Owner + "/second"
	w.jobs.Pause()
	var ids []int64
	for i := range 6 {
		ids = append(ids, w.jobs.QueueJob(localenv.Repo, int64(8000+i), labels, "echo $GITHUB_REPOSITORY"),
			w.jobs.QueueJob(second, int64(8100+i), labels, "echo $GITHUB_REPOSITORY"))
	}
	w.accepted(ids, "queued")
	w.jobs.Resume()
	done := w.ran(ids, 5*time.Minute)
	runners := map[string]bool{}
	for _, j := range done {
		require.Equal(t, "success", j.Conclusion, "job %d of %s: %s", j.ID, j.Repo, j.Output)
		require.False(t, runners[j.RunnerName], "job %d: runner %s ran another job too", j.ID, j.RunnerName)
		runners[j.RunnerName] = true
		repos, ok := w.GH.Group(j.RunnerGroup)
		require.True(t, ok, "job %d ran in group %q", j.ID, j.RunnerGroup)
		require.Equal(t, []string{string(j.Repo)}, repos, "job %d of %s: its runner's group is open to its repository alone", j.ID, j.Repo)
		_, key, _ := w.RunnerNames().Parse(j.RunnerName)
		_, again, _ := names.ParseJobKey(key)
		require.Zero(t, again, "job %d: placed once (%s)", j.ID, j.RunnerName)
	}
	require.Equal(t, 2, w.GH.GroupsMade(), "one group per repository")
	w.settled(w.launched(), 3*time.Minute)
}

// TestBurstOverTheCap: twelve jobs at once on an empty pool with maxInstances 4: never more than
// four instances launched, every job runs once and succeeds as instances come back (each woken job
// on an instance just wiped), none is dead-lettered or counted failed.
func TestBurstOverTheCap(t *testing.T) {
	t.Parallel()
	logs := &testbed.Buffer{}
	w := newWorld(t, 10*time.Minute, localenv.JobsOptions{MaxInstances: 4, BatchSize: 20, BatchWindow: time.Second,
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "component=dispatch") || strings.Contains(l, "component=webhook") {
					t.Log(l)
				}
			}
		}
	})
	w.jobs.Pause()
	ids := w.queue(localenv.Repo, 12, "sleep 1; echo done")
	w.jobs.Resume()
	done := w.ran(ids, 3*time.Minute)
	runners := map[string]bool{}
	for _, j := range done {
		require.Equal(t, "success", j.Conclusion, "job %d: %s", j.ID, j.Output)
		require.False(t, runners[j.RunnerName], "job %d: runner %s ran another job too", j.ID, j.RunnerName)
		runners[j.RunnerName] = true
	}
	created := w.launched() // none ends in this test: what was ever launched is what is live
	require.LessOrEqual(t, created, 4, "never more instances than the cap: fleets %v", w.ec2.Fleets())
	require.Contains(t, w.jobs.Metrics.String(), "JobsWaiting")
	require.NotContains(t, w.jobs.Metrics.String(), "JobsFailed")
	attrs, err := sqs.NewFromConfig(w.AWS).GetQueueAttributes(w.ctx, &sqs.GetQueueAttributesInput{QueueUrl: &w.jobs.JobsDLQURL,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages}})
	require.NoError(t, err)
	require.Equal(t, "0", attrs.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)], "nothing dead-lettered")
	w.settled(created, 3*time.Minute)
}

// TestLostDeliveries: a burst of 200 jobs over a pool capped at 40 while one delivery in ten is
// lost, half never made by GitHub and half answered 503 by a throttled Function URL: the sweep
// redelivers the failed ones and admits the queued jobs no delivery brought, and every job runs
// once, on a runner of its own, with never more than 40 instances.
func TestLostDeliveries(t *testing.T) {
	t.Parallel()
	logs := &testbed.Buffer{}
	w := newWorld(t, 20*time.Minute, localenv.JobsOptions{MaxInstances: 40, BatchSize: 100, BatchWindow: time.Second,
		SweepEvery: 3 * time.Second, SweepSchedule: 3 * time.Second, MissingAfter: 5 * time.Second, FailEvery: 20,
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	var ids []int64
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var stuck []string
		for _, id := range ids {
			if j, _ := w.GH.Job(id); j.Status != "completed" {
				stuck = append(stuck, fmt.Sprintf("job=%d ", id), fmt.Sprintf("j%d", id))
			}
		}
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "level=ERROR") || slices.ContainsFunc(stuck, func(s string) bool { return strings.Contains(l, s) }) {
				t.Log(l)
			}
		}
		for _, d := range w.GH.Deliveries() {
			if slices.Contains(stuck, fmt.Sprintf("job=%d ", d.JobID)) {
				t.Logf("delivery %s %s job %d status %d dropped %v redelivery %v", d.ID, d.Action, d.JobID, d.Status, d.Dropped, d.Redelivery)
			}
		}
	})
	w.GH.DropEvery(20)
	n := 200
	for i := range n {
		ids = append(ids, w.jobs.QueueJob(localenv.Repo, int64(7000+i), labels, "echo done"))
	}
	done := w.ran(ids, 8*time.Minute)
	runners := map[string]bool{}
	for _, j := range done {
		require.Equal(t, "success", j.Conclusion, "job %d: %s", j.ID, j.Output)
		require.False(t, runners[j.RunnerName], "job %d: runner %s ran another job too", j.ID, j.RunnerName)
		runners[j.RunnerName] = true
	}
	created := w.launched()
	require.LessOrEqual(t, created, 40, "never more instances than the cap: fleets %v", w.ec2.Fleets())
	var dropped, failed int
	for _, d := range w.GH.Deliveries() {
		switch {
		case d.Dropped:
			dropped++
		case d.Status == 503:
			failed++
		}
	}
	t.Logf("deliveries dropped %d, answered 503 %d, redelivered by the sweep %d", dropped, failed, w.GH.Redelivered())
	require.Positive(t, dropped)
	require.Positive(t, failed)
	require.Positive(t, w.GH.Redelivered(), "the sweep redelivered the failed deliveries")
	require.LessOrEqual(t, w.GH.Redelivered(), failed, "each failed event redelivered once")
	require.Regexp(t, `"JobsRecovered":[1-9]`, w.jobs.Metrics.String(), "the sweep admitted jobs no delivery brought")
	w.settled(created, 4*time.Minute)
}

// TestRotationMidBurst: the App's key and the webhook secret are rotated, as docs/labels.md says
// to, while jobs flow (the old key deleted on GitHub and its installation tokens gone, as an hour
// later): every delivery is taken at its first attempt, and every job runs once.
func TestRotationMidBurst(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 10*time.Minute, localenv.JobsOptions{BatchSize: 20, BatchWindow: 500 * time.Millisecond})
	var ids []int64
	queue := func(n int) {
		for range n {
			ids = append(ids, w.jobs.QueueJob(localenv.Repo, int64(8000+len(ids)), labels, "sleep 1; echo done"))
		}
	}
	queue(10)
	w.accepted(ids[:5], "queued")
	require.NoError(t, w.jobs.RotateWebhookSecret(w.ctx))
	queue(10)
	require.NoError(t, w.jobs.RotateAppKey(w.ctx))
	w.GH.ExpireInstallationTokens()
	queue(10)
	done := w.ran(ids, 5*time.Minute)
	runners := map[string]bool{}
	for _, j := range done {
		require.Equal(t, "success", j.Conclusion, "job %d: %s", j.ID, j.Output)
		require.False(t, runners[j.RunnerName], "job %d: runner %s ran another job too", j.ID, j.RunnerName)
		runners[j.RunnerName] = true
	}
	for _, d := range w.GH.Deliveries() {
		require.True(t, d.Status == 202 || d.Status == 200, "delivery %s (%s of job %d) answered %d", d.ID, d.Action, d.JobID, d.Status)
	}
	require.NotContains(t, w.jobs.Metrics.String(), "AppErrors")
	w.settled(w.launched(), 3*time.Minute)
}
