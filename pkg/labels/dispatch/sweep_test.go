package dispatch_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
)

// sweep hands the dispatcher the schedule's sweep message.
func (w *fakeWorld) sweep() {
	w.t.Helper()
	require.Empty(w.t, w.handle(jobs.Message{Kind: jobs.KindSweep}), "a sweep is never retried")
}

// recorded returns which of ids have a recorded queued event.
func (w *fakeWorld) recorded(ids ...int64) []int64 {
	w.t.Helper()
	got, err := w.Store.Events(context.Background(), string(jobs.KindQueued), ids)
	require.NoError(w.t, err)
	var out []int64
	for _, id := range ids {
		if _, ok := got[id]; ok {
			out = append(out, id)
		}
	}
	return out
}

// TestFakeSweepRedelivers: the sweep asks GitHub to deliver again each workflow_job event none
// of whose attempts was taken (no answer, 401 during a rotation, 429, 5xx), once: not an event
// one attempt delivered, one refused for good (403: outside the trust set), one redelivered
// already, another event, one of a repository outside the trust set, nor one older than the
// sweep's window.
func TestFakeSweepRedelivers(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	at := func(ago time.Duration) time.Time { return w.now.Add(-ago) }
	// Each attempt's id is its position: 1 for the first.
	w.GitHub.SetRepositories(ghapi.Repository{ID: 11, FullName: "octo/app"}, ghapi.Repository{ID: 12, FullName: "evil/x"})
	attempt := func(guid, action string, code int, ago time.Duration, redelivery bool) {
		w.app.Attempt(ghapi.Delivery{GUID: guid, Event: "workflow_job", Action: action, StatusCode: code, At: at(ago), Redelivery: redelivery,
			Installation: 7, RepositoryID: 11})
	}
	attempt("old", "queued", 503, 2*time.Hour, false) // before the first sweep's hour
	attempt("throttled", "queued", 429, 50*time.Minute, false)
	attempt("taken", "queued", 202, 40*time.Minute, false)
	attempt("refused", "queued", 403, 30*time.Minute, false)
	attempt("again", "in_progress", 0, 20*time.Minute, false)
	attempt("again", "in_progress", 0, 19*time.Minute, true) // redelivered already, failed again
	attempt("rotated", "completed", 401, 10*time.Minute, false)
	attempt("failed-then-taken", "queued", 502, 5*time.Minute, false)
	attempt("failed-then-taken", "queued", 202, 4*time.Minute, true)
	w.app.Attempt(ghapi.Delivery{GUID: "ping", Event: "ping", StatusCode: 500, At: at(time.Minute)})
	w.app.Attempt(ghapi.Delivery{GUID: "outsider", Event: "workflow_job", Action: "queued", StatusCode: 503, At: at(time.Minute),
		Installation: 7, RepositoryID: 12}) // outside the trust set: it would be refused again
	w.sweep()
	require.Equal(t, []int64{7, 2}, w.app.Redelivered(), "rotated (the 7th attempt), then throttled (the 2nd): newest first")

	// A second message within half the period does nothing; the next sweep sees the attempts
	// the first asked for, taken, and asks for nothing again.
	w.sweep()
	require.Len(t, w.app.Redelivered(), 2)
	w.now = w.now.Add(5 * time.Minute)
	attempt("throttled", "queued", 202, 4*time.Minute, true)
	attempt("rotated", "completed", 401, 4*time.Minute, true) // the secret is still wrong: left to the reconciliation
	w.sweep()
	require.Len(t, w.app.Redelivered(), 2, "each event redelivered once")
	require.Contains(t, w.metrics.String(), `"DeliveriesRedelivered":2`)
}

// TestFakeSweepRecoversQueuedJobs: a job queued with no delivery at all is found through the
// installation's runs and admitted as the webhook would (recorded, routed, on the jobs queue),
// then placed; so is one that started with no queued delivery (on a sibling's runner, which waits
// for its placement); a job queued moments ago, one recorded already, one without the stack label
// and one of a repository outside the trust set are left alone; a late delivery of a recovered
// job is then a duplicate.
func TestFakeSweepRecoversQueuedJobs(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	w.AddIdle(t, fake.Idle{Served: []string{"octo/app"}, LastRun: "j1"})
	w.GitHub.SetRepositories(ghapi.Repository{ID: 11, FullName: "octo/app"}, ghapi.Repository{ID: 12, FullName: "evil/x"})
	ours := []string{"self-hosted", "hangar", "linux-x64"}
	old := w.now.Add(-5 * time.Minute)
	w.GitHub.SetWorkflowJob("octo/app", ghapi.WorkflowJob{ID: 500, RunID: 9, RunAttempt: 1, Status: "queued", Labels: ours, CreatedAt: old})
	w.GitHub.SetWorkflowJob("octo/app", ghapi.WorkflowJob{ID: 501, RunID: 9, Status: "queued", Labels: ours, CreatedAt: w.now.Add(-30 * time.Second)})
	w.GitHub.SetWorkflowJob("octo/app", ghapi.WorkflowJob{ID: 502, RunID: 9, Status: "queued", Labels: ours, CreatedAt: old})
	w.GitHub.SetWorkflowJob("octo/app", ghapi.WorkflowJob{ID: 503, RunID: 9, Status: "queued", Labels: []string{"ubuntu-latest"}, CreatedAt: old})
	w.GitHub.SetWorkflowJob("octo/app", ghapi.WorkflowJob{ID: 504, RunID: 9, Status: "in_progress", Labels: ours, CreatedAt: old})
	w.GitHub.SetWorkflowJob("evil/x", ghapi.WorkflowJob{ID: 505, RunID: 10, Status: "queued", Labels: ours, CreatedAt: old})
	_, err := w.Store.RecordEvent(context.Background(), 502, "queued", "{}")
	require.NoError(t, err)

	w.sweep()
	require.Equal(t, []int64{500, 502, 504}, w.recorded(500, 501, 502, 503, 504, 505), "jobs 500 and 504 were admitted")
	admitted := w.sent(jobs.KindQueued)
	require.Len(t, admitted, 2)
	slices.SortFunc(admitted, func(a, b jobs.Message) int { return cmp.Compare(a.Job.ID, b.Job.ID) })
	require.Equal(t, jobs.Job{ID: 500, RunID: 9, RunAttempt: 1, Repo: "octo/app", RepoID: 11, Labels: ours, Pool: w.Doc.Name, Installation: 7,
		Delivery: "sweep"}, admitted[0].Job)
	require.Equal(t, int64(504), admitted[1].Job.ID)
	require.Empty(t, w.handle(admitted[0]))
	require.NotNil(t, w.holder(500), "the recovered job is placed")
	require.Contains(t, w.metrics.String(), `"JobsRecovered":2`)
	require.Equal(t, 0, w.GitHub.Calls("Repositories")-1, "the repositories are listed once an hour")

	w.now = w.now.Add(5 * time.Minute)
	_, err = w.Store.RecordEvent(context.Background(), 501, "queued", "{}") // its delivery came
	require.NoError(t, err)
	sends := w.SQS.Calls("SendMessageBatch")
	w.sweep()
	require.Equal(t, sends, w.SQS.Calls("SendMessageBatch"), "a recovered job is recovered once")
	first, err := w.Store.RecordEvent(context.Background(), 500, "queued", "{}")
	require.NoError(t, err)
	require.False(t, first, "a late delivery of the job is a duplicate")
}

// TestFakeSweepBounded: a sweep makes at most its bound of GitHub requests, and the next one goes
// on from the repository where it stopped, so that every repository is reached in turn.
func TestFakeSweepBounded(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	const n = 60
	var repos []ghapi.Repository
	var ids []int64
	for i := range n {
		repo := fmt.Sprintf("octo/r%02d", i)
		repos = append(repos, ghapi.Repository{ID: int64(100 + i), FullName: repo})
		w.GitHub.SetWorkflowJob(repo, ghapi.WorkflowJob{ID: int64(1000 + i), RunID: int64(2000 + i), Status: "queued",
			Labels: []string{"hangar", "linux-x64"}, CreatedAt: w.now.Add(-time.Hour)})
		ids = append(ids, int64(1000+i))
	}
	w.GitHub.SetRepositories(repos...)
	calls := func() int {
		return w.app.Calls("HookDeliveries") + w.app.Calls("Installations") + w.GitHub.Calls("Repositories") +
			w.GitHub.Calls("ActiveRuns") + w.GitHub.Calls("RunJobs")
	}
	for sweep := 1; len(w.recorded(ids...)) < n; sweep++ {
		require.LessOrEqual(t, sweep, 4, "every repository reached within four sweeps")
		before := calls()
		w.sweep()
		require.LessOrEqual(t, calls()-before, 51, "one sweep's requests (the last one asked is the one over the bound)")
		w.now = w.now.Add(5 * time.Minute)
	}
}

// TestFakeSweepRescuesStrandedJobs: a job GitHub still has queued long after it was recorded,
// which no instance holds under any of its keys and which waits on no waiter (its runner vanished
// with nothing left to say so), is placed again, once; one an instance holds is not.
func TestFakeSweepRescuesStrandedJobs(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	w.AddIdle(t, fake.Idle{})
	w.GitHub.SetRepositories(ghapi.Repository{ID: 11, FullName: "octo/app"})
	old := w.now.Add(-10 * time.Minute)
	for _, id := range []int64{600, 601} {
		j := w.job(id, "")
		body, err := jobs.Message{Kind: jobs.KindQueued, Job: j}.Encode()
		require.NoError(t, err)
		_, err = w.Store.RecordEvent(context.Background(), id, "queued", body)
		require.NoError(t, err)
		w.GitHub.SetWorkflowJob("octo/app", ghapi.WorkflowJob{ID: id, RunID: j.RunID, Status: "queued", Labels: j.Labels, CreatedAt: old})
	}
	require.Empty(t, w.handle(queued(w.job(601, ""))...))
	require.NotNil(t, w.holder(601))
	w.sent(jobs.KindCheck) // drain

	w.sweep()
	again := w.sent(jobs.KindQueued)
	require.Len(t, again, 1, "job 600, stranded, is placed again; job 601 has its instance")
	require.Equal(t, "j600r1", again[0].Job.Key())
	require.False(t, again[0].Spare, "not placed if it starts meanwhile")
	w.now = w.now.Add(5 * time.Minute)
	sends := w.SQS.Calls("SendMessageBatch")
	w.sweep()
	require.Equal(t, sends, w.SQS.Calls("SendMessageBatch"), "j600r1 waits on the waiters: not placed again")

	// A wake took j600r1 off the waiters and died before placing it: the next sweep places it.
	_, ok, err := w.Store.TakeWaiter(context.Background(), "linux", "j600r1", state.AnyRound)
	require.NoError(t, err)
	require.True(t, ok)
	w.now = w.now.Add(5 * time.Minute)
	w.sweep()
	var keys []string
	for _, m := range w.sent(jobs.KindQueued) {
		keys = append(keys, m.Job.Key())
	}
	require.Contains(t, keys, "j600r2", "placed again: on no waiter and held by no instance")
}
