package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/labels/dispatch"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/platform/metrics"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
)

const (
	jobsQueue = "https://sqs.us-east-1.amazonaws.com/123456789012/hangar-jobs"
	returns   = "https://sqs.us-east-1.amazonaws.com/123456789012/hangar-returns"
)

// fakeWorld is the dispatcher on the fakes: one pool serving label-routed jobs.
type fakeWorld struct {
	*fake.World
	t       *testing.T
	x       *dispatch.Dispatcher
	seq     int
	metrics *testbed.Buffer
	app     *fake.AppHooks
	now     time.Time // the dispatcher's clock
}

func newFakeWorld(t *testing.T) *fakeWorld {
	t.Helper()
	return newFakeWorldWith(t, nil)
}

// newFakeWorldWith is newFakeWorld with the pool's document changed by change.
func newFakeWorldWith(t *testing.T, change func(d map[string]any)) *fakeWorld {
	t.Helper()
	doc := fake.Pool(t, "linux", func(d map[string]any) {
		d["jobs"] = map[string]any{"stackLabel": "hangar", "labels": []string{"linux-x64"}}
		d["returnsQueueUrl"] = returns
		if change != nil {
			change(d)
		}
	})
	w := &fakeWorld{World: fake.NewWorld(t, doc), t: t, metrics: &testbed.Buffer{}, app: fake.NewAppHooks(100, 7), now: time.Now()}
	x, err := dispatch.New(dispatch.Config{Stack: fake.Stack, JobsQueueURL: jobsQueue, CheckAfter: time.Minute}, dispatch.Deps{
		Pools: &pooldoc.Cache{SSM: w.SSM, Stack: fake.Stack}, Pool: w.Pool, Events: w.Store, Waiting: w.Store,
		GitHub: func(int64, ghapi.Scope) (dispatch.Runners, error) { return w.GitHub, nil },
		App:    w.app, Cursors: w.Store, Now: func() time.Time { return w.now },
		SQS: w.SQS, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: &metrics.Writer{Out: w.metrics},
	})
	require.NoError(t, err)
	w.x = x
	return w
}

// job is a queued job of repo (octo/app when empty).
func (w *fakeWorld) job(id int64, repo string) jobs.Job {
	if repo == "" {
		repo = "octo/app"
	}
	return jobs.Job{ID: id, RunID: 900, Repo: repo, RepoID: int64(len(repo)) * 1000, Labels: []string{"hangar", "linux-x64"}, Pool: w.Doc.Name, Installation: 7}
}

// handle hands the dispatcher one batch of jobs-queue messages and returns the ids it failed.
func (w *fakeWorld) handle(msgs ...jobs.Message) []string {
	w.t.Helper()
	var batch []dispatch.Message
	for _, m := range msgs {
		body, err := m.Encode()
		require.NoError(w.t, err)
		w.seq++
		batch = append(batch, dispatch.Message{ID: fmt.Sprintf("m%d", w.seq), Body: body, Source: dispatch.FromJobs, Receives: 1})
	}
	return w.x.Handle(context.Background(), batch)
}

// ret hands the dispatcher an agent's return.
func (w *fakeWorld) ret(r jobs.Return) []string {
	w.t.Helper()
	body, err := r.Encode()
	require.NoError(w.t, err)
	w.seq++
	return w.x.Handle(context.Background(), []dispatch.Message{{ID: fmt.Sprintf("r%d", w.seq), Body: body, Source: dispatch.FromReturns, Receives: 1}})
}

func queued(js ...jobs.Job) []jobs.Message {
	out := make([]jobs.Message, len(js))
	for i, j := range js {
		out[i] = jobs.Message{Kind: jobs.KindQueued, Job: j}
	}
	return out
}

// holder returns the item holding job's key.
func (w *fakeWorld) holder(job int64) *state.Instance {
	w.t.Helper()
	return w.holderOf(names.JobKey(job, 0))
}

// holderOf is holder for a job's key.
func (w *fakeWorld) holderOf(key string) *state.Instance {
	w.t.Helper()
	held, err := w.Store.ByRun(context.Background(), key)
	require.NoError(w.t, err)
	require.Len(w.t, held, 1, "one instance holds %s", key)
	// The fake agent answers the assignment on its own goroutine: wait for its REGISTERED, so
	// that what a test writes next is not overwritten by it.
	id := held[0].ID
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(w.t, w.Store.Wait(ctx, func(items map[string]*state.Instance) bool {
		it := items[id]
		return it == nil || it.RunID != key || it.SignalFor(state.SignalRegistered, key, it.Version)
	}), "the agent of %s answers %s", id, key)
	return w.Store.Item(id)
}

// finish ends job (of repo) on the instance it holds, as GitHub and the agent do: its completed
// webhook, then the agent's DEREGISTERED; it returns the agent's return, for the test to hand in.
func (w *fakeWorld) finish(it *state.Instance, job int64, repo string) jobs.Return {
	w.t.Helper()
	j := w.job(job, repo)
	j.RunnerName, j.Conclusion = state.RunnerNamesOf(fake.Stack).Name(it.ID, it.RunID), "success"
	require.Empty(w.t, w.handle(jobs.Message{Kind: jobs.KindCompleted, Job: j}))
	require.Eventually(w.t, func() bool {
		cur := w.Store.Item(it.ID)
		return cur.SignalFor(state.SignalDeregistered, it.RunID, cur.Version)
	}, 10*time.Second, 10*time.Millisecond)
	return jobs.Return{InstanceID: it.ID, Key: it.RunID, Version: it.Version}
}

// checks returns the checks the dispatcher sent itself.
func (w *fakeWorld) sent(kind jobs.Kind) []jobs.Message {
	w.t.Helper()
	out, err := w.SQS.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(jobsQueue), MaxNumberOfMessages: 10})
	require.NoError(w.t, err)
	var msgs []jobs.Message
	for _, m := range out.Messages {
		msg, err := jobs.Parse(aws.ToString(m.Body))
		require.NoError(w.t, err)
		if msg.Kind == kind {
			msgs = append(msgs, msg)
		}
	}
	return msgs
}

// TestFakePlacement: a batch of jobs claims the idle instances its repository may use, one job
// each with a runner made for that instance, whose configuration reaches that instance's doorbell
// alone, and creates the rest with one CreateFleet; every job's check is sent.
func TestFakePlacement(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	a := w.AddIdle(t, fake.Idle{Served: []string{"octo/app"}, LastRun: "j1"})
	w.AddIdle(t, fake.Idle{Served: []string{"octo/other"}, LastRun: "j2"}) // another repository's: not for octo/app
	require.Empty(t, w.handle(queued(w.job(11, ""), w.job(12, ""), w.job(13, ""))...))

	held := map[string]int64{}
	for _, j := range []int64{11, 12, 13} {
		it := w.holder(j)
		held[it.ID] = j
		require.Equal(t, names.JobKey(j, 0), it.RunID)
		require.Equal(t, "octo/app", it.Repo)
		require.Equal(t, int64(7), it.Installation)
		require.NotZero(t, it.RunnerID)
		require.Equal(t, "https://github.com/octo/app", it.RunnerURL)
	}
	require.Contains(t, held, a.ID, "the idle instance that served octo/app was claimed")
	require.Equal(t, state.Claimed, w.Store.Item(a.ID).State)
	require.Len(t, w.EC2.Fleets(), 1, "the two others come from one CreateFleet")
	require.Equal(t, int32(2), *w.EC2.Fleets()[0].TargetCapacitySpecification.TotalTargetCapacity)
	runners := w.GitHub.RunnerNames()
	require.Len(t, runners, 3, "one runner per job")
	for id, j := range held {
		require.Contains(t, runners, state.RunnerNamesOf(fake.Stack).Name(id, names.JobKey(j, 0)), "runners are named for their instance and job")
	}
	configs := map[string]bool{}
	for id := range held {
		it := w.Store.Item(id)
		var got []doorbell.HandOver
		for _, body := range w.SQS.Bodies(it.Bell) {
			var h doorbell.HandOver
			require.NoError(t, json.Unmarshal([]byte(body), &h), "a doorbell message of %s", id)
			got = append(got, h)
		}
		require.Len(t, got, 1, "one hand-over to %s's doorbell", id)
		require.Equal(t, doorbell.KindJIT, got[0].Kind)
		require.Equal(t, it.RunID, got[0].Run, "for the job the item holds")
		require.Equal(t, it.Version, got[0].Version, "at the version the placement wrote")
		require.NotEmpty(t, got[0].Secret)
		configs[got[0].Secret] = true
	}
	require.Len(t, configs, 3, "each instance its own configuration")
	require.Len(t, w.sent(jobs.KindCheck), 3, "each job's check is sent")
}

// TestFakeSecondOfferAcrossRepositories: a fresh instance offered twice (SQS delivers at least
// once) is claimed for one repository's job; the other repository's job, placed in the same
// batch, never has a runner made for that instance or handed to it: it gets an instance of its
// own, and neither job's message fails.
func TestFakeSecondOfferAcrossRepositories(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	fresh := w.AddIdle(t, fake.Idle{})
	require.NoError(t, w.Queue(t).Publish(context.Background(), fresh)) // the same offer, again
	require.Empty(t, w.handle(queued(w.job(11, "octo/app"), w.job(12, "octo/other"))...), "both jobs placed")

	app := w.holder(11)
	require.Equal(t, fresh.ID, app.ID, "the fresh instance serves the first repository's job")
	other := w.holder(12)
	require.NotEqual(t, fresh.ID, other.ID)
	require.Len(t, w.EC2.Fleets(), 1, "the other repository's job gets an instance of its own")
	var got []doorbell.HandOver
	for _, body := range w.SQS.Bodies(app.Bell) {
		var h doorbell.HandOver
		require.NoError(t, json.Unmarshal([]byte(body), &h))
		got = append(got, h)
	}
	require.Len(t, got, 1, "one hand-over to the claimed instance")
	require.Equal(t, "j11", got[0].Run)
	require.Equal(t, []string{
		state.RunnerNamesOf(fake.Stack).Name(fresh.ID, "j11"), state.RunnerNamesOf(fake.Stack).Name(other.ID, "j12"),
	}, w.GitHub.RunnerNames(), "no runner of the second job was made for the first job's instance")
	require.Len(t, w.sent(jobs.KindCheck), 2, "each job's check is sent")
}

// TestFakeGitHubDown: when GitHub fails to make runners, no claim is written, nothing is created,
// and the jobs' messages fail (to be delivered again).
func TestFakeGitHubDown(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	idle := w.AddIdle(t, fake.Idle{})
	w.GitHub.Inject("GenerateJITConfig", fake.GitHubError(http.StatusBadGateway, "Server Error"))
	failed := w.handle(queued(w.job(21, ""))...)
	require.Len(t, failed, 1, "the job's message fails")
	require.Equal(t, state.Idle, w.Store.Item(idle.ID).State, "no claim")
	require.Equal(t, []string{idle.ID}, w.Offered(t), "the offer is given back")
	require.Empty(t, w.EC2.Fleets(), "nothing created")
	require.Empty(t, w.GitHub.RunnerNames())

	require.Empty(t, w.handle(queued(w.job(21, ""))...), "delivered again, it is placed")
	require.Equal(t, idle.ID, w.holder(21).ID)
}

// TestFakeAppCannotMakeRunners: while the App cannot make runners (a permission the
// installation lacks, a key GitHub refuses), nothing is claimed or launched: the job's message
// fails (it waits on the queue), AppErrors counts it for the alarm (a passing GitHub outage is
// not counted), and once the App can, the delivery again is placed.
func TestFakeAppCannotMakeRunners(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	idle := w.AddIdle(t, fake.Idle{})
	// A passing outage: the jobs wait all the same, but nobody is paged.
	w.GitHub.Inject("CanMakeRunners", fake.GitHubError(http.StatusBadGateway, "Server Error"))
	require.Len(t, w.handle(queued(w.job(31, ""))...), 1, "the message fails")
	require.Equal(t, state.Idle, w.Store.Item(idle.ID).State, "no claim")
	require.NotContains(t, w.metrics.String(), "AppErrors")

	w.GitHub.Inject("CanMakeRunners", fmt.Errorf("%w: installation 7 may not make runners in octo/app: its Administration permission is none, want write", ghapi.ErrAppRefused))
	failed := w.handle(queued(w.job(31, ""), w.job(32, ""))...)
	require.Len(t, failed, 2, "both messages fail")
	require.Equal(t, state.Idle, w.Store.Item(idle.ID).State, "no claim")
	require.Empty(t, w.EC2.Fleets(), "nothing launched")
	require.Empty(t, w.GitHub.RunnerNames())
	require.Contains(t, w.metrics.String(), `"AppErrors":1`)

	require.Empty(t, w.handle(queued(w.job(31, ""))...), "delivered again once the App can, it is placed")
	require.Equal(t, idle.ID, w.holder(31).ID)
}

// TestFakeCompletedFirst: a job whose completed event is recorded before its queued message is
// handled (cancelled while queued) is not placed.
func TestFakeCompletedFirst(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	idle := w.AddIdle(t, fake.Idle{})
	_, err := w.Store.RecordEvent(context.Background(), 31, "completed", "{}")
	require.NoError(t, err)
	require.Empty(t, w.handle(queued(w.job(31, ""))...))
	require.Equal(t, state.Idle, w.Store.Item(idle.ID).State)
	require.Empty(t, w.GitHub.RunnerNames())
	require.Empty(t, w.EC2.Fleets())
}

// TestFakeRedelivered: a batch delivered again after its dispatcher died finds the jobs placed
// already and places them again nowhere.
func TestFakeRedelivered(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	w.AddIdle(t, fake.Idle{})
	require.Empty(t, w.handle(queued(w.job(41, ""))...))
	body, err := jobs.Message{Kind: jobs.KindQueued, Job: w.job(41, "")}.Encode()
	require.NoError(t, err)
	require.Empty(t, w.x.Handle(context.Background(), []dispatch.Message{{ID: "again", Body: body, Receives: 2}}))
	held, err := w.Store.ByRun(context.Background(), names.JobKey(41, 0))
	require.NoError(t, err)
	require.Len(t, held, 1, "still one instance for the job")
	require.Empty(t, w.EC2.Fleets(), "nothing created for it")
	require.Len(t, w.GitHub.RunnerNames(), 1)
}

// TestFakeLifeOfAJob: in_progress moves the instance to running; completed gives it back to idle
// without offering it (its agent wipes first); the agent's return offers it, once; a late return
// and a late completed change nothing.
func TestFakeLifeOfAJob(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	w.AddIdle(t, fake.Idle{})
	require.Empty(t, w.handle(queued(w.job(51, ""))...))
	it := w.holder(51)
	runner := state.RunnerNamesOf(fake.Stack).Name(it.ID, it.RunID)
	j := w.job(51, "")
	j.RunnerName, j.RunnerID = runner, it.RunnerID
	require.Empty(t, w.handle(jobs.Message{Kind: jobs.KindInProgress, Job: j}))
	running := w.Store.Item(it.ID)
	require.Equal(t, state.Running, running.State)
	require.Equal(t, it.RunID, running.RunID)

	j.Conclusion = "success"
	require.Empty(t, w.handle(jobs.Message{Kind: jobs.KindCompleted, Job: j}))
	back := w.Store.Item(it.ID)
	require.Equal(t, state.Idle, back.State)
	require.Equal(t, it.RunID, back.LastRunID)
	require.Empty(t, w.Offered(t), "not offered before its agent has wiped it")

	// The agent wipes (the fake agent signals DEREGISTERED for the key) and returns.
	require.Eventually(t, func() bool {
		return w.Store.Item(it.ID).SignalFor(state.SignalDeregistered, it.RunID, back.Version)
	}, 10*time.Second, 10*time.Millisecond)
	require.Empty(t, w.ret(jobs.Return{InstanceID: it.ID, Key: it.RunID, Version: it.Version}))
	require.Equal(t, []string{it.ID}, w.Offered(t), "offered once its agent wiped it")
	require.Empty(t, w.ret(jobs.Return{InstanceID: it.ID, Key: it.RunID, Version: it.Version}))
	require.Empty(t, w.handle(jobs.Message{Kind: jobs.KindCompleted, Job: j}))
	require.Equal(t, back.Version, w.Store.Item(it.ID).Version, "late events change nothing")
}

// TestFakeReturnFirst: the agent's return comes before completed: it gives the instance back and
// offers it; completed then finds it moved on.
func TestFakeReturnFirst(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	w.AddIdle(t, fake.Idle{})
	require.Empty(t, w.handle(queued(w.job(61, ""))...))
	it := w.holder(61)
	require.NoError(t, w.Store.AgentSignal(it.ID, state.Signal{Name: state.SignalDeregistered, Run: it.RunID, Version: it.Version, At: time.Now()}))
	require.Empty(t, w.ret(jobs.Return{InstanceID: it.ID, Key: it.RunID, Version: it.Version}))
	back := w.Store.Item(it.ID)
	require.Equal(t, state.Idle, back.State)
	require.Equal(t, []string{it.ID}, w.Offered(t))
	j := w.job(61, "")
	j.RunnerName, j.Conclusion = state.RunnerNamesOf(fake.Stack).Name(it.ID, it.RunID), "success"
	require.Empty(t, w.handle(jobs.Message{Kind: jobs.KindCompleted, Job: j}))
	require.Equal(t, back.Version, w.Store.Item(it.ID).Version)
}

// TestFakeReturnFailed: an agent that could not wipe (FAILED) has its instance terminated, never
// offered, and the job it held, which never started, is placed again at once, once.
func TestFakeReturnFailed(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	w.AddIdle(t, fake.Idle{})
	require.Empty(t, w.handle(queued(w.job(71, ""))...))
	w.sent(jobs.KindCheck)
	body, err := jobs.Message{Kind: jobs.KindQueued, Job: w.job(71, "")}.Encode()
	require.NoError(t, err)
	_, err = w.Store.RecordEvent(context.Background(), 71, "queued", body) // the webhook's record
	require.NoError(t, err)
	it := w.holder(71)
	require.NoError(t, w.Store.AgentSignal(it.ID, state.Signal{Name: state.SignalFailed, Version: it.Version, At: time.Now(), Log: "cleanup failed"}))
	require.Empty(t, w.ret(jobs.Return{InstanceID: it.ID, Key: it.RunID, Version: it.Version}))
	require.Equal(t, state.Terminated, w.Store.Item(it.ID).State)
	require.Empty(t, w.Offered(t))
	again := w.sent(jobs.KindQueued)
	require.Len(t, again, 1, "the job it held, not started, is placed again at once")
	require.Equal(t, "j71r1", again[0].Job.Key())
	require.Empty(t, w.ret(jobs.Return{InstanceID: it.ID, Key: it.RunID, Version: it.Version}), "a return delivered again")
	for _, m := range w.sent(jobs.KindQueued) {
		require.Equal(t, "j71r1", m.Job.Key(), "places nothing more")
	}
}

// TestFakeCheck: a runner still waiting at its check is deleted and its instance given back, and
// the job, still queued, is placed again under its next key; a busy runner (its job started, the
// in_progress webhook not yet handled) moves the instance to running instead.
func TestFakeCheck(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	w.AddIdle(t, fake.Idle{})
	w.AddIdle(t, fake.Idle{})
	require.Empty(t, w.handle(queued(w.job(81, ""), w.job(82, ""))...))
	checks := w.sent(jobs.KindCheck)
	require.Len(t, checks, 2)
	queuedBody, err := jobs.Message{Kind: jobs.KindQueued, Job: w.job(81, "")}.Encode()
	require.NoError(t, err)
	_, err = w.Store.RecordEvent(context.Background(), 81, "queued", queuedBody)
	require.NoError(t, err)

	busy := w.holder(82)
	w.GitHub.SetBusy(state.RunnerNamesOf(fake.Stack).Name(busy.ID, busy.RunID), true)
	waiting := w.holder(81)
	require.Empty(t, w.handle(checks...))

	require.Equal(t, state.Running, w.Store.Item(busy.ID).State, "a busy runner's instance goes running")
	back := w.Store.Item(waiting.ID)
	require.Equal(t, state.Idle, back.State, "the waiting runner's instance is given back")
	require.NotContains(t, w.GitHub.RunnerNames(), state.RunnerNamesOf(fake.Stack).Name(waiting.ID, waiting.RunID), "and its runner deleted")
	again := w.sent(jobs.KindQueued)
	require.Len(t, again, 1, "the job, still queued, is placed again")
	require.Equal(t, int64(81), again[0].Job.ID)
	require.Equal(t, "j81r1", again[0].Job.Key())
}

// TestFakeForeignJobTookTheRunner: a job that is not the pool's took a runner: the job the runner
// was made for is placed again; a sibling job of the same pool taking it changes nothing.
func TestFakeForeignJobTookTheRunner(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	w.AddIdle(t, fake.Idle{})
	w.AddIdle(t, fake.Idle{})
	require.Empty(t, w.handle(queued(w.job(91, ""), w.job(92, ""))...))
	w.sent(jobs.KindCheck) // drain
	for _, j := range []int64{91, 92} {
		body, err := jobs.Message{Kind: jobs.KindQueued, Job: w.job(j, "")}.Encode()
		require.NoError(t, err)
		_, err = w.Store.RecordEvent(context.Background(), j, "queued", body)
		require.NoError(t, err)
	}
	r91, r92 := w.holder(91), w.holder(92)

	sibling := w.job(92, "")
	sibling.RunnerName = state.RunnerNamesOf(fake.Stack).Name(r91.ID, r91.RunID)
	require.Empty(t, w.handle(jobs.Message{Kind: jobs.KindInProgress, Job: sibling}))
	require.Equal(t, state.Running, w.Store.Item(r91.ID).State)
	require.Empty(t, w.sent(jobs.KindQueued), "a sibling of the same pool took it: job 91 takes the sibling's runner")

	foreign := jobs.Job{ID: 999, RunID: 5, Repo: "octo/app", Labels: []string{"self-hosted"}, Installation: 7,
		RunnerName: state.RunnerNamesOf(fake.Stack).Name(r92.ID, r92.RunID)}
	require.Empty(t, w.handle(jobs.Message{Kind: jobs.KindInProgress, Job: foreign}))
	require.Empty(t, w.handle(jobs.Message{Kind: jobs.KindInProgress, Job: foreign}), "a repeated (or replayed) event")
	again := w.sent(jobs.KindQueued)
	require.Len(t, again, 1, "a job outside the pool took job 92's runner: 92 is placed again, once")
	require.Equal(t, "j92r1", again[0].Job.Key())
	require.True(t, again[0].Spare, "a spare: placed even if job 92 starts meanwhile")
}

// TestFakeForeignJobTookTheRunnerInProgressLost: the in_progress that would say a foreign job took
// a runner is lost; its completed says the same, and the job the runner was made for is placed
// again, once, even after its instance has moved on.
func TestFakeForeignJobTookTheRunnerInProgressLost(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	w.AddIdle(t, fake.Idle{})
	require.Empty(t, w.handle(queued(w.job(93, ""))...))
	w.sent(jobs.KindCheck) // drain
	body, err := jobs.Message{Kind: jobs.KindQueued, Job: w.job(93, "")}.Encode()
	require.NoError(t, err)
	_, err = w.Store.RecordEvent(context.Background(), 93, "queued", body)
	require.NoError(t, err)
	r93 := w.holder(93)

	foreign := jobs.Job{ID: 998, RunID: 5, Repo: "octo/other", Labels: []string{"self-hosted"}, Installation: 7, Conclusion: "success",
		RunnerName: state.RunnerNamesOf(fake.Stack).Name(r93.ID, r93.RunID)}
	require.Empty(t, w.handle(jobs.Message{Kind: jobs.KindCompleted, Job: foreign}))
	require.Equal(t, state.Idle, w.Store.Item(r93.ID).State, "the instance goes back")
	require.Empty(t, w.handle(jobs.Message{Kind: jobs.KindCompleted, Job: foreign}), "a repeated (or replayed) event")
	again := w.sent(jobs.KindQueued)
	require.Len(t, again, 1, "job 93 is placed again, once")
	require.Equal(t, "j93r1", again[0].Job.Key())
}

// TestFakeSiblingWithoutPlacement: a sibling whose queued delivery was lost takes a runner: it
// has no placement to leave the made-for job, which is placed again, once; the sibling's queued
// event is then recorded, so that its late delivery (or the sweep) places nothing more.
func TestFakeSiblingWithoutPlacement(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	w.AddIdle(t, fake.Idle{})
	require.Empty(t, w.handle(queued(w.job(94, ""))...))
	w.sent(jobs.KindCheck) // drain
	body, err := jobs.Message{Kind: jobs.KindQueued, Job: w.job(94, "")}.Encode()
	require.NoError(t, err)
	_, err = w.Store.RecordEvent(context.Background(), 94, "queued", body)
	require.NoError(t, err)
	r94 := w.holder(94)

	sibling := w.job(95, "")
	sibling.RunnerName = state.RunnerNamesOf(fake.Stack).Name(r94.ID, r94.RunID)
	require.Empty(t, w.handle(jobs.Message{Kind: jobs.KindInProgress, Job: sibling}))
	require.Empty(t, w.handle(jobs.Message{Kind: jobs.KindInProgress, Job: sibling}), "a repeated event")
	again := w.sent(jobs.KindQueued)
	require.Len(t, again, 1, "job 94 is placed again, once")
	require.Equal(t, "j94r1", again[0].Job.Key())
	first, err := w.Store.RecordEvent(context.Background(), 95, "queued", "{}")
	require.NoError(t, err)
	require.False(t, first, "the sibling's queued event is recorded: its late delivery is a duplicate")
}

// TestFakeLostClaimUndoesItsRunner: a claim that loses (the instance moved on under the offer)
// deletes the runner made for it, and its job is placed elsewhere.
func TestFakeLostClaimUndoesItsRunner(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	stale := w.AddIdle(t, fake.Idle{})
	// The instance moves on after its offer was published: the offer is stale.
	_, err := w.Store.Transition(context.Background(), state.Change{InstanceID: stale.ID, Pool: stale.Pool, From: state.Idle,
		To: state.Stopped, Version: stale.Version, Threshold: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Empty(t, w.handle(queued(w.job(101, ""))...))
	it := w.holder(101)
	require.NotEqual(t, stale.ID, it.ID, "placed on a new instance")
	names := w.GitHub.RunnerNames()
	require.Len(t, names, 1, "the lost claim's runner was deleted: %v", names)
	require.True(t, strings.Contains(names[0], it.ID))
	require.True(t, slices.Contains(names, state.RunnerNamesOf(fake.Stack).Name(it.ID, it.RunID)))
}

// TestFakeRunnerNotStarted: an agent that could not start its job's runner (REGISTER_FAILED, after
// cleaning up) returns the instance: it is given back, counted, and offered; its runner deleted;
// and the job placed again. The second failure in a row retires the instance.
func TestFakeRunnerNotStarted(t *testing.T) {
	t.Parallel()
	w := newFakeWorld(t)
	w.AddIdle(t, fake.Idle{})
	require.Empty(t, w.handle(queued(w.job(111, ""))...))
	w.sent(jobs.KindCheck)
	body, err := jobs.Message{Kind: jobs.KindQueued, Job: w.job(111, "")}.Encode()
	require.NoError(t, err)
	_, err = w.Store.RecordEvent(context.Background(), 111, "queued", body)
	require.NoError(t, err)
	it := w.holder(111)
	require.NoError(t, w.Store.AgentSignal(it.ID, state.Signal{Name: state.SignalRegisterFailed, Run: it.RunID, Version: it.Version, At: time.Now(),
		Log: "could not open the configuration"}))
	require.Empty(t, w.ret(jobs.Return{InstanceID: it.ID, Key: it.RunID, Version: it.Version}))
	back := w.Store.Item(it.ID)
	require.Equal(t, state.Idle, back.State)
	require.Equal(t, 1, back.RegisterFailures)
	require.Equal(t, []string{it.ID}, w.Offered(t))
	require.Empty(t, w.GitHub.RunnerNames(), "its runner deleted")
	again := w.sent(jobs.KindQueued)
	require.Len(t, again, 1)
	require.Equal(t, "j111r1", again[0].Job.Key())

	require.Empty(t, w.handle(again...))
	again1 := w.holderOf("j111r1")
	require.Equal(t, it.ID, again1.ID, "the same instance serves the job again")
	it = again1
	require.NoError(t, w.Store.AgentSignal(it.ID, state.Signal{Name: state.SignalRegisterFailed, Run: it.RunID, Version: it.Version, At: time.Now()}))
	require.Empty(t, w.ret(jobs.Return{InstanceID: it.ID, Key: it.RunID, Version: it.Version}))
	require.Equal(t, state.Terminated, w.Store.Item(it.ID).State, "the second failure in a row retires it")
}

// TestFakeRepositoryNoLongerAllowed: a job whose repository its pool no longer allows (the pools
// changed after the webhook routed it) is dropped, not placed.
func TestFakeRepositoryNoLongerAllowed(t *testing.T) {
	t.Parallel()
	doc := fake.Pool(t, "linux", func(d map[string]any) {
		d["jobs"] = map[string]any{"stackLabel": "hangar", "labels": []string{"linux-x64"}}
		d["returnsQueueUrl"] = returns
		d["allowedRepositories"] = []string{"octo/app"}
	})
	w := &fakeWorld{World: fake.NewWorld(t, doc), t: t, metrics: &testbed.Buffer{}}
	x, err := dispatch.New(dispatch.Config{Stack: fake.Stack, JobsQueueURL: jobsQueue}, dispatch.Deps{
		Pools: &pooldoc.Cache{SSM: w.SSM, Stack: fake.Stack}, Pool: w.Pool, Events: w.Store, Waiting: w.Store,
		GitHub: func(int64, ghapi.Scope) (dispatch.Runners, error) { return w.GitHub, nil }, SQS: w.SQS,
		App: fake.NewAppHooks(100), Cursors: w.Store, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	w.x = x
	idle := w.AddIdle(t, fake.Idle{})
	require.Empty(t, w.handle(queued(w.job(121, "evil/app"))...), "dropped, not retried")
	require.Equal(t, state.Idle, w.Store.Item(idle.ID).State)
	require.Empty(t, w.EC2.Fleets())
	require.Empty(t, w.GitHub.RunnerNames())
}

// TestFakeOrganizationScope: an organisation-scoped pool's runners are made at the organisation,
// each in a runner group made for its job's repository alone (asked of GitHub once per group),
// and the assignment names the organisation's runner URL and that group. A job without its
// repository's id is not placed: its runner could only be made in a group open to others.
func TestFakeOrganizationScope(t *testing.T) {
	t.Parallel()
	doc := fake.Pool(t, "linux", func(d map[string]any) {
		d["jobs"] = map[string]any{"stackLabel": "hangar", "labels": []string{"linux-x64"}, "scope": "organization"}
		d["returnsQueueUrl"] = returns
	})
	w := &fakeWorld{World: fake.NewWorld(t, doc), t: t, metrics: &testbed.Buffer{}}
	var (
		mu     sync.Mutex // the placements of a batch make their clients at once
		scopes []ghapi.Scope
	)
	x, err := dispatch.New(dispatch.Config{Stack: fake.Stack, JobsQueueURL: jobsQueue}, dispatch.Deps{
		Pools: &pooldoc.Cache{SSM: w.SSM, Stack: fake.Stack}, Pool: w.Pool, Events: w.Store, Waiting: w.Store,
		GitHub: func(_ int64, s ghapi.Scope) (dispatch.Runners, error) {
			mu.Lock()
			defer mu.Unlock()
			scopes = append(scopes, s)
			return w.GitHub, nil
		},
		App: fake.NewAppHooks(100), Cursors: w.Store, SQS: w.SQS, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	w.x = x
	for range 4 {
		w.AddIdle(t, fake.Idle{})
	}
	app, web := w.job(131, "octo/app"), w.job(133, "octo/website")
	app2 := w.job(132, "octo/app")
	require.Empty(t, w.handle(queued(app, app2, web)...))
	rn := state.RunnerNamesOf(fake.Stack)
	for _, j := range []jobs.Job{app, app2, web} {
		it := w.holder(j.ID)
		require.Equal(t, "https://github.com/octo", it.RunnerURL, "organisation runners register at the organisation")
		require.Equal(t, rn.RepositoryGroup(j.RepoID), it.RunnerGroup, "job %d: its repository's own group", j.ID)
	}
	require.Equal(t, map[string]int64{rn.RepositoryGroup(app.RepoID): app.RepoID, rn.RepositoryGroup(web.RepoID): web.RepoID},
		w.GitHub.Groups(), "one group per repository, each open to that repository alone")
	mu.Lock()
	require.Contains(t, scopes, ghapi.Scope{Owner: "octo"})
	mu.Unlock()
	require.Equal(t, 2, w.GitHub.Calls("RepositoryGroup"), "each group is asked for once")

	noID := w.job(134, "octo/app")
	noID.RepoID = 0
	require.Len(t, w.handle(queued(noID)...), 1, "not placed: it waits on the queue")
	held, err := w.Store.ByRun(context.Background(), names.JobKey(134, 0))
	require.NoError(t, err)
	require.Empty(t, held, "nothing claimed for it")
}

// TestFakeWaitsForRoom: five jobs on an empty pool with maxInstances 2 create two instances; the
// other three wait, in order, on the pool's waiters (no message failed, no receive burned, none
// counted failed), each with its own delayed try. A try while the pool is still full waits
// again. When an instance comes back (its agent wiped it), the job that has waited longest is
// placed on it at once, handed that very instance (never offered, where another claim could
// take it), and that job's own try then finds nothing to do.
func TestFakeWaitsForRoom(t *testing.T) {
	t.Parallel()
	w := newFakeWorldWith(t, func(d map[string]any) { d["maxInstances"] = 2 })
	var js []jobs.Job
	for i := range 5 {
		js = append(js, w.job(int64(71+i), ""))
	}
	require.Empty(t, w.handle(queued(js...)...), "nothing failed: the jobs wait")
	created := 0
	for _, it := range w.Store.Items() {
		if it.State != state.Terminated {
			created++
		}
	}
	require.Equal(t, 2, created, "no more instances than the cap")
	waiting, err := w.Store.Waiters(context.Background(), "linux", 10)
	require.NoError(t, err)
	require.Len(t, waiting, 3)
	tries := w.sent(jobs.KindQueued)
	require.Len(t, tries, 3, "each waiting job's own try")
	for _, m := range tries {
		require.Equal(t, 1, m.Round)
		require.False(t, m.WaitingSince.IsZero())
	}
	require.Contains(t, w.metrics.String(), `"JobsWaiting":3`)
	require.NotContains(t, w.metrics.String(), "JobsFailed")

	// A try while the pool is full: the job waits again, its next try later.
	var try jobs.Message
	for _, m := range tries {
		if m.Job.ID == 75 {
			try = m
		}
	}
	require.Empty(t, w.handle(try))
	var again []jobs.Message
	for _, m := range w.sent(jobs.KindQueued) {
		if m.Round == 2 {
			again = append(again, m)
		}
	}
	require.Len(t, again, 1, "its next try")
	require.Equal(t, try.WaitingSince, again[0].WaitingSince, "it has waited since it first could not be placed")
	waiting, err = w.Store.Waiters(context.Background(), "linux", 10)
	require.NoError(t, err)
	require.Len(t, waiting, 3, "still waiting")
	var keys []string
	for _, wt := range waiting {
		keys = append(keys, wt.Key)
	}

	// The first job ends and its instance comes back: the oldest waiting job gets it.
	first := w.holder(71)
	require.Empty(t, w.ret(w.finish(first, 71, "")))
	oldest := w.Store.Item(first.ID).RunID
	require.Contains(t, keys, oldest, "the instance that came back serves a job that waited (the longest: they all began at once)")
	require.Empty(t, w.Offered(t), "handed to the waiting job, never offered")
	w.holderOf(oldest)
	waiting, err = w.Store.Waiters(context.Background(), "linux", 10)
	require.NoError(t, err)
	require.Len(t, waiting, 2)
	for _, m := range tries {
		if m.Job.Key() == oldest {
			require.Empty(t, w.handle(m), "its own try finds it placed")
		}
	}
	held, err := w.Store.ByRun(context.Background(), oldest)
	require.NoError(t, err)
	require.Len(t, held, 1, "placed once")
}

// TestFakeWaitingSiblingTookTheRunner: a job of the same pool and repository that waits for room
// takes another's runner: nothing is placed again (its own placement, when room comes, is for the
// job it took the runner from), and that placement is made although it has started.
func TestFakeWaitingSiblingTookTheRunner(t *testing.T) {
	t.Parallel()
	w := newFakeWorldWith(t, func(d map[string]any) { d["maxInstances"] = 1 })
	require.Empty(t, w.handle(queued(w.job(95, ""), w.job(96, ""))...))
	waiting, err := w.Store.Waiters(context.Background(), "linux", 10)
	require.NoError(t, err)
	require.Len(t, waiting, 1, "one of the two waits for room")
	waiter, _, _ := names.ParseJobKey(waiting[0].Key)
	placed := 95 + 96 - waiter
	it := w.holder(placed)
	w.sent(jobs.KindCheck) // drain

	taker := w.job(waiter, "")
	taker.RunnerName = state.RunnerNamesOf(fake.Stack).Name(it.ID, it.RunID)
	require.Empty(t, w.handle(jobs.Message{Kind: jobs.KindInProgress, Job: taker}))
	_, err = w.Store.RecordEvent(context.Background(), waiter, "in_progress", "{}")
	require.NoError(t, err)
	for _, m := range w.sent(jobs.KindQueued) {
		require.Zero(t, m.Job.Redispatch, "nothing placed again: %+v", m.Job)
	}
	waiting, err = w.Store.Waiters(context.Background(), "linux", 10)
	require.NoError(t, err)
	require.Len(t, waiting, 1, "the taker's placement still waits for room, for the other job")

	// Room comes (the instance is gone): the taker's placement is made, started as it is.
	cur := w.Store.Item(it.ID)
	require.NoError(t, w.Store.AgentSignal(it.ID, state.Signal{Name: state.SignalFailed, Version: cur.Version, At: time.Now()}))
	require.Empty(t, w.ret(jobs.Return{InstanceID: it.ID, Key: it.RunID, Version: cur.Version}))
	held, err := w.Store.ByRun(context.Background(), names.JobKey(waiter, 0))
	require.NoError(t, err)
	require.Len(t, held, 1, "placed when room came, for the job whose runner it took")
}

// TestFakeComeBackFitsReuse: an instance that comes back goes to the longest waiting job its
// pool's reuse scope lets it serve (not to an older one of another repository, which it may not
// serve); with no such job waiting, it is offered.
func TestFakeComeBackFitsReuse(t *testing.T) {
	t.Parallel()
	w := newFakeWorldWith(t, func(d map[string]any) { d["maxInstances"] = 1 })
	require.Empty(t, w.handle(queued(w.job(81, ""))...))
	it := w.holder(81)
	w.now = w.now.Add(time.Second)
	require.Empty(t, w.handle(queued(w.job(82, "acme/web"))...), "waits: the cap")
	w.now = w.now.Add(time.Second)
	require.Empty(t, w.handle(queued(w.job(83, ""))...), "waits: the cap")
	waiting, err := w.Store.Waiters(context.Background(), "linux", 10)
	require.NoError(t, err)
	require.Len(t, waiting, 2)
	require.Equal(t, names.JobKey(82, 0), waiting[0].Key, "acme/web's job has waited longest")

	require.Empty(t, w.ret(w.finish(it, 81, "")))
	require.Equal(t, names.JobKey(83, 0), w.Store.Item(it.ID).RunID, "octo/app's instance serves octo/app's waiting job")
	require.Empty(t, w.Offered(t))
	waiting, err = w.Store.Waiters(context.Background(), "linux", 10)
	require.NoError(t, err)
	require.Len(t, waiting, 1)
	require.Equal(t, names.JobKey(82, 0), waiting[0].Key, "acme/web's job still waits: its own tries, or room, place it")

	it = w.holder(83)
	require.Empty(t, w.ret(w.finish(it, 83, "")))
	require.Equal(t, state.Idle, w.Store.Item(it.ID).State)
	require.Equal(t, []string{it.ID}, w.Offered(t), "no job it may serve waits: offered")
}

// TestFakeRoomWakesWaiters: a job that finds another creation counting against the cap does not
// hold its batch: it waits for room. The next creation, which leaves room to spare, places it at
// once (it does not wait for its own try), and never more than the cap is launched.
func TestFakeRoomWakesWaiters(t *testing.T) {
	t.Parallel()
	w := newFakeWorldWith(t, func(d map[string]any) { d["maxInstances"] = 3 })
	lease, holder := "cap/"+fake.Stack+"/linux", state.NewLeaseHolder()
	ok, err := w.Store.Lease(context.Background(), lease, holder, time.Minute)
	require.NoError(t, err)
	require.True(t, ok, "another creation is under way")
	require.Empty(t, w.handle(queued(w.job(61, ""))...), "nothing failed: it waits")
	waiting, err := w.Store.Waiters(context.Background(), "linux", 10)
	require.NoError(t, err)
	require.Len(t, waiting, 1)
	require.Zero(t, w.EC2.Calls("CreateFleet"), "nothing launched while the cap is busy")
	require.Contains(t, w.metrics.String(), `"JobsWaiting":1`)

	require.NoError(t, w.Store.ReleaseLease(context.Background(), lease, holder))
	require.Empty(t, w.handle(queued(w.job(62, ""))...))
	w.holder(62)
	w.holder(61) // placed by the room job 62's creation left, not by its own try
	waiting, err = w.Store.Waiters(context.Background(), "linux", 10)
	require.NoError(t, err)
	require.Empty(t, waiting)
	live := 0
	for _, it := range w.Store.Items() {
		if it.State != state.Terminated {
			live++
		}
	}
	require.Equal(t, 2, live)
}

// TestFakeReturnsHandedOnTogether: a batch of returns takes its instances back together: each
// goes to a job waiting for room, in one placement, and none is offered.
func TestFakeReturnsHandedOnTogether(t *testing.T) {
	t.Parallel()
	w := newFakeWorldWith(t, func(d map[string]any) { d["maxInstances"] = 2 })
	require.Empty(t, w.handle(queued(w.job(51, ""), w.job(52, ""), w.job(53, ""), w.job(54, ""))...))
	waiting, err := w.Store.Waiters(context.Background(), "linux", 10)
	require.NoError(t, err)
	require.Len(t, waiting, 2)
	var batch []dispatch.Message
	var held []*state.Instance
	for _, id := range []int64{51, 52, 53, 54} {
		keys, _ := w.Store.ByRun(context.Background(), names.JobKey(id, 0))
		if len(keys) == 0 {
			continue
		}
		it := w.holder(id)
		held = append(held, it)
		body, err := w.finish(it, id, "").Encode()
		require.NoError(t, err)
		batch = append(batch, dispatch.Message{ID: "r-" + it.ID, Body: body, Source: dispatch.FromReturns, Receives: 1})
	}
	require.Len(t, batch, 2)
	require.Empty(t, w.x.Handle(context.Background(), batch))
	for _, wt := range waiting {
		id, _, _ := names.ParseJobKey(wt.Key)
		got := w.holder(id)
		require.True(t, got.ID == held[0].ID || got.ID == held[1].ID, "a waiting job got an instance back")
	}
	require.Empty(t, w.Offered(t))
	left, err := w.Store.Waiters(context.Background(), "linux", 10)
	require.NoError(t, err)
	require.Empty(t, left)
}

// TestFakeWokenJobNotLost: a job a wake takes off the waiters whose placement then fails (GitHub
// cannot make its runner) waits again, with a try of its own of the next round, and the instance
// that came back is offered: neither is lost.
func TestFakeWokenJobNotLost(t *testing.T) {
	t.Parallel()
	w := newFakeWorldWith(t, func(d map[string]any) { d["maxInstances"] = 1 })
	require.Empty(t, w.handle(queued(w.job(41, ""), w.job(42, ""))...))
	waiting, err := w.Store.Waiters(context.Background(), "linux", 10)
	require.NoError(t, err)
	require.Len(t, waiting, 1)
	waiter, _, _ := names.ParseJobKey(waiting[0].Key)
	it := w.holder(41 + 42 - waiter)
	w.sent(jobs.KindQueued) // drain the first tries
	ret := w.finish(it, 41+42-waiter, "")
	w.GitHub.Inject("GenerateJITConfig", fake.GitHubError(http.StatusBadGateway, "Server Error"))
	require.Empty(t, w.ret(ret))

	require.Equal(t, []string{it.ID}, w.Offered(t), "the instance is offered")
	waiting, err = w.Store.Waiters(context.Background(), "linux", 10)
	require.NoError(t, err)
	require.Len(t, waiting, 1, "the job waits again")
	require.Equal(t, names.JobKey(waiter, 0), waiting[0].Key)
	require.Equal(t, 2, waiting[0].Round)
	var tries []jobs.Message
	for _, m := range w.sent(jobs.KindQueued) {
		if m.Job.ID == waiter && m.Round == 2 {
			tries = append(tries, m)
		}
	}
	require.Len(t, tries, 1, "with a try of its own")
}

// TestFakeTriesWaitBehindTheLongestWaiting: under a full cap, the try of a job another of its
// repository has waited longer than does not count the cap (some twenty queries on DynamoDB): it
// moves on to its next round and schedules its next try; the longest-waiting job's own try counts
// it. A job of another repository, or behind a job whose try is overdue, is tried anyway.
func TestFakeTriesWaitBehindTheLongestWaiting(t *testing.T) {
	t.Parallel()
	w := newFakeWorldWith(t, func(d map[string]any) { d["maxInstances"] = 1 })
	require.Empty(t, w.handle(queued(w.job(81, ""))...), "the one instance the cap allows")
	require.Empty(t, w.handle(queued(w.job(82, ""))...))
	w.now = w.now.Add(time.Second)
	require.Empty(t, w.handle(queued(w.job(83, ""), w.job(84, ""), w.job(85, "octo/other"))...))
	tries := map[int64]jobs.Message{}
	for _, m := range w.sent(jobs.KindQueued) {
		tries[m.Job.ID] = m
	}
	require.Len(t, tries, 4, "82 to 85 wait, each with a try")
	waiter := func(id int64) state.Waiter {
		ws, err := w.Store.Waiters(context.Background(), "linux", 10)
		require.NoError(t, err)
		for _, wt := range ws {
			if wt.Key == (jobs.Job{ID: id}).Key() {
				return wt
			}
		}
		return state.Waiter{Round: -1}
	}
	require.False(t, waiter(82).Due.IsZero(), "a waiter says when its try is due")

	census, takes := w.Store.Calls("Census"), w.Store.Calls("TakeWaiter")
	w.now = w.now.Add(15 * time.Second)
	require.Empty(t, w.handle(tries[83], tries[84]))
	require.Equal(t, census, w.Store.Calls("Census"), "behind 82: the cap is not counted")
	require.Equal(t, takes, w.Store.Calls("TakeWaiter"), "nor are they taken off the waiters")
	require.Equal(t, 2, waiter(83).Round)
	require.Equal(t, 2, waiter(84).Round)
	require.True(t, waiter(84).Due.After(w.now), "its next try is due later")
	next := map[int64]jobs.Message{}
	for _, m := range w.sent(jobs.KindQueued) {
		if m.Round == 2 {
			next[m.Job.ID] = m
		}
	}
	require.Len(t, next, 2, "each one's next try")
	require.Equal(t, tries[83].WaitingSince, next[83].WaitingSince, "it has waited since it began")
	require.Empty(t, w.handle(tries[83]), "a repeated delivery of the round before")
	require.Equal(t, 2, waiter(83).Round, "takes nothing and moves nothing")

	// Another repository's job: an idle instance only it may use could be on the queue.
	census = w.Store.Calls("Census")
	require.Empty(t, w.handle(tries[85]))
	require.Greater(t, w.Store.Calls("Census"), census, "85 is octo/other's: it is tried")
	require.Equal(t, 2, waiter(85).Round, "and waits again")

	// The longest-waiting job's own try counts the cap, and waits again.
	census = w.Store.Calls("Census")
	require.Empty(t, w.handle(tries[82]))
	require.Greater(t, w.Store.Calls("Census"), census, "the longest waiting counts the cap")
	require.Equal(t, 2, waiter(82).Round)

	// 82's next try is lost: once it is overdue by two minutes, 84 counts the cap itself.
	w.now = waiter(82).Due.Add(3 * time.Minute)
	census = w.Store.Calls("Census")
	require.Empty(t, w.handle(next[84]))
	require.Greater(t, w.Store.Calls("Census"), census, "82's try is overdue: 84 is tried")
	require.Equal(t, 3, waiter(84).Round, "and waits again")
}
