package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// event serves one jobs-queue message other than queued.
func (x *Dispatcher) event(ctx context.Context, msg jobs.Message) error {
	switch msg.Kind {
	case jobs.KindInProgress:
		return x.started(ctx, msg.Job)
	case jobs.KindCompleted:
		return x.completed(ctx, msg.Job)
	case jobs.KindCheck:
		return x.check(ctx, msg)
	case jobs.KindUnregister:
		return x.unregister(ctx, msg)
	case jobs.KindSweep:
		if err := x.sweep(ctx); err != nil {
			x.d.Log.Error("sweep", "error", err)
		}
		return nil // the next one comes with the schedule: a sweep is not retried
	}
	return fmt.Errorf("message kind %q: not the dispatcher's", msg.Kind)
}

// served returns the instance a runner of the stack's was made for and the key it serves, read
// now; nil when the runner is not one of the stack's label-routed runners or its instance is gone.
func (x *Dispatcher) served(ctx context.Context, runner string) (*state.Instance, string, error) {
	id, key, ok := x.names.Parse(runner)
	if !ok || !names.IsJobKey(key) {
		return nil, "", nil
	}
	it, err := x.d.Pool.Store.Get(ctx, id)
	if errors.Is(err, state.ErrNotFound) || errors.Is(err, state.ErrBadItem) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	return it, key, nil
}

// pool returns an instance's pool document.
func (x *Dispatcher) pool(ctx context.Context, name string) (*pooldoc.Document, error) {
	stack, err := x.d.Pools.LoadStack(ctx)
	if err != nil {
		return nil, err
	}
	if doc := stack.Pool(name); doc != nil {
		return doc, nil
	}
	return nil, fmt.Errorf("pool %s: no document: the stack no longer has it", name)
}

// started moves the instance whose runner took a job to running, deadline the pool's running
// timeout. When the runner took a job it was not made for, of another pool or repository, or
// outside the trust set (GitHub hands a job to any runner that has all its labels), the job it
// was made for has lost its runner and is placed again.
func (x *Dispatcher) started(ctx context.Context, j jobs.Job) error {
	it, key, err := x.served(ctx, j.RunnerName)
	if err != nil || it == nil {
		return err
	}
	doc, err := x.pool(ctx, it.Pool)
	if err != nil {
		return err
	}
	if it.RunID == key && (it.State == state.Claimed || it.State == state.Created) {
		_, err := x.d.Pool.Store.Transition(ctx, state.Change{InstanceID: it.ID, Pool: it.Pool, From: it.State, To: state.Running,
			Version: it.Version, RunID: key, Threshold: x.d.Now().Add(doc.Timeout(state.Running)), TookJob: j.ID,
			Reason: fmt.Sprintf("its runner took job %d of %s", j.ID, j.Repo)})
		if err != nil && !errors.Is(err, state.ErrConflict) {
			return err
		}
	}
	return x.tookRunner(ctx, it, key, doc, j)
}

// tookRunner places again the job a runner was made for (key, on instance it of pool doc) when
// job j took that runner and leaves the made-for job no placement: a job of another pool or
// repository, or outside the trust set. started and completed both ask (either event may be
// lost); the record of each placing makes the second ask do nothing.
func (x *Dispatcher) tookRunner(ctx context.Context, it *state.Instance, key string, doc *pooldoc.Document, j jobs.Job) error {
	made, _, _ := names.ParseJobKey(key)
	if made == j.ID {
		return nil
	}
	// Who lost its runner is settled even when the event comes late (the instance has moved on
	// since: a short job can be over first); the repository is then its queued event's.
	repo := it.Repo
	if it.RunID != key {
		msg, ok, err := x.queuedEvent(ctx, made)
		if err != nil || !ok {
			return err // not remembered any more: nothing to place
		}
		repo = msg.Job.Repo
	}
	// A job of another pool or repository, or one the pool does not admit (outside the trust
	// set), took the runner: the job it was made for would otherwise wait for a runner no one
	// makes. A job of the same pool and repository leaves its own placement to it: its runner,
	// or the one it waits for (a placement is made even for a job that has started: unplaced).
	// Unless the taker has no placement: its queued delivery was lost (or is still on its way).
	if j.Pool == it.Pool && strings.EqualFold(j.Repo, repo) && doc.Admits(j.Repo, j.Installation) == nil {
		// The taker's queued record is claimed here: when it was written before, its placement
		// exists; when this writes it, a late queued delivery of the taker is a duplicate, and
		// the made-for job's new placement is the pair's one.
		taker := j
		taker.RunnerName, taker.RunnerID, taker.Conclusion = "", 0, ""
		body, err := jobs.Message{Kind: jobs.KindQueued, Job: taker}.Encode()
		if err != nil {
			return fmt.Errorf("record job %d's placement as taken over: %w", j.ID, err)
		}
		if first, err := x.d.Events.RecordEvent(ctx, j.ID, string(jobs.KindQueued), body); err != nil || !first {
			return err
		}
	}
	return x.redispatch(ctx, made, key, j)
}

// queuedEvent returns the jobs message the webhook recorded for job's queued event; ok false
// when it is no longer remembered.
func (x *Dispatcher) queuedEvent(ctx context.Context, job int64) (jobs.Message, bool, error) {
	queued, err := x.d.Events.Events(ctx, "queued", []int64{job})
	if err != nil {
		return jobs.Message{}, false, err
	}
	body, ok := queued[job]
	if !ok {
		return jobs.Message{}, false, nil
	}
	msg, err := jobs.Parse(body)
	if err != nil {
		return jobs.Message{}, false, fmt.Errorf("the queued event of job %d: %w", job, err)
	}
	return msg, true, nil
}

// redispatched is the dispatcher's record that a job was placed again under its n-th key.
func redispatched(n int) string { return fmt.Sprintf("redispatch%d", n) }

// redispatch places job made again: its runner took job took instead, which leaves no placement
// of its own in the pool (a job of another pool or repository, or outside the trust set: the new
// placement is a spare, made whether or not made has started since), or (took zero) its runner
// was removed at its bound while made still waited (nothing is done when made runs or ran
// elsewhere), or (took made itself) the sweep found it stranded. Nothing is done for a job placed again too often.
func (x *Dispatcher) redispatch(ctx context.Context, made int64, key string, took jobs.Job) error {
	_, n, _ := names.ParseJobKey(key)
	// A runner taken (took set) is made again even when made runs or ran elsewhere already: it
	// then ran on a runner another job left it, and whichever job of the pool and repository is
	// still queued lost that one (GitHub hands the jobs to the runners in any order: what must
	// hold is a runner for every job still queued, not for a given one).
	for _, action := range []string{"in_progress", "completed"} {
		if took.ID != 0 {
			break
		}
		seen, err := x.d.Events.Events(ctx, action, []int64{made})
		if err != nil {
			return err
		}
		if _, ok := seen[made]; ok {
			return nil
		}
	}
	msg, ok, err := x.queuedEvent(ctx, made)
	if err != nil || !ok {
		return err // not remembered any more: nothing to place
	}
	if n+1 > jobs.MaxRedispatch {
		x.d.Log.Error("job lost its runner once too often; not placed again", "job", made,
			"repository", msg.Job.Repo, "took", took.ID)
		x.count(msg.Job.Pool, "JobsFailed", 1) // the pool's JobsFailed alarm
		return nil
	}
	msg.Job.Redispatch = n + 1
	msg.Kind, msg.Spare = jobs.KindQueued, took.ID != 0 && took.ID != made
	next, err := msg.Encode()
	if err != nil {
		return fmt.Errorf("place job %d again: %w", made, err)
	}
	// Once per lost runner: a repeated or replayed event finds it recorded and places nothing.
	action := redispatched(n + 1)
	if first, err := x.d.Events.RecordEvent(ctx, made, action, next); err != nil || !first {
		return err
	}
	// The new key waits on the pool's waiters until it is placed (wake or its message, whichever
	// takes it first: one conditional delete, so it is placed once).
	err = x.d.Waiting.AddWaiter(ctx, state.Waiter{Pool: msg.Job.Pool, Key: msg.Job.Key(), Body: next, Since: x.d.Now()})
	if err == nil {
		err = x.send(ctx, []jobs.Message{msg}, nil)
	}
	if err != nil {
		// Not placed: forget the record, so that the event's next delivery tries again.
		return errors.Join(fmt.Errorf("place job %d again: %w", made, err), x.d.Events.ForgetEvent(context.WithoutCancel(ctx), made, action))
	}
	switch {
	case took.ID == made: // the sweep's rescue of a stranded job, which said so
	case took.ID != 0:
		x.d.Log.Warn("a job of another pool or outside the stack took a runner; placing its job again", "job", made,
			"repository", msg.Job.Repo, "took", took.ID, "tookRepository", took.Repo, "tookLabels", took.Labels)
	default:
		x.d.Log.Warn("a job's runner got no job within its bound while the job still waits; placing it again", "job", made,
			"repository", msg.Job.Repo)
	}
	return nil
}

// completed gives back the instance whose runner ran the job, at once (deadline the pool's idle
// timeout; its doorbell rung): one conditional write, which the agent's return may have beaten.
// It is offered again when its agent has wiped it (returned). A job that completed without ever
// starting (cancelled while queued) has its waiting runner removed now rather than at its check.
func (x *Dispatcher) completed(ctx context.Context, j jobs.Job) error {
	if j.RunnerName == "" {
		return x.cancelled(ctx, j)
	}
	it, key, err := x.served(ctx, j.RunnerName)
	if err != nil || it == nil {
		return err
	}
	doc, err := x.pool(ctx, it.Pool)
	if err != nil {
		if it.RunID == key && serving(it.State) {
			return err // retried: the instance must go back
		}
		x.d.Log.Warn("a completed job's pool has no document; nothing more is done for it", "job", j.ID, "pool", it.Pool, "error", err)
		return nil
	}
	if it.RunID == key && serving(it.State) {
		_, err = x.d.Pool.ToIdle(ctx, pool.Back{Instance: *it, Idle: doc.Timeout(state.Idle), RunID: key,
			Reason: fmt.Sprintf("job %d completed (%s)", j.ID, j.Conclusion)})
		if err != nil && !errors.Is(err, state.ErrConflict) {
			return err
		}
	}
	// The job's in_progress may have been lost: who lost the runner is settled here too.
	if err := x.tookRunner(ctx, it, key, doc, j); err != nil {
		return err
	}
	if j.Conclusion != "success" && j.RunnerID != 0 {
		// GitHub removes a just-in-time runner after a job it finished; one that lost its
		// instance mid-job may stay, offline.
		if scope := scopeOf(doc, j.Repo); scope.Owner != "" {
			return x.deleteRunner(ctx, j.Installation, scope, j.RunnerID, 0)
		}
	}
	return nil
}

// cancelled removes the runners made for a job that ended before it started, and gives their
// instances back.
func (x *Dispatcher) cancelled(ctx context.Context, j jobs.Job) error {
	var errs []error
	for n := 0; n <= jobs.MaxRedispatch; n++ {
		held, err := x.holder(ctx, names.JobKey(j.ID, n))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if held == nil {
			if n > 0 {
				break
			}
			continue
		}
		if held.State == state.Claimed {
			_, err := x.removeWaiting(ctx, held, j, fmt.Sprintf("job %d ended before it started", j.ID))
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// check looks at a job's runner once its bound has passed: one still waiting for a job (claimed,
// or created and its runner started) is removed and its instance given back; an instance still
// booting is looked at again later.
func (x *Dispatcher) check(ctx context.Context, msg jobs.Message) error {
	it, err := x.d.Pool.Store.Get(ctx, msg.InstanceID)
	if errors.Is(err, state.ErrNotFound) || errors.Is(err, state.ErrBadItem) {
		return nil
	}
	if err != nil {
		return err
	}
	if it.RunID != msg.Key {
		return nil // moved on: the job ran, or the instance went
	}
	switch {
	case it.State == state.Created && !it.SignalFor(state.SignalRegistered, msg.Key, it.Version):
		if x.d.Now().After(it.Threshold) {
			return nil // refresh terminates an instance that never came up
		}
		next := msg
		next.Round++
		return x.send(ctx, []jobs.Message{next}, []time.Duration{x.cfg.BootCheckEvery})
	case it.State == state.Claimed, it.State == state.Created:
		removed, err := x.removeWaiting(ctx, it, msg.Job, fmt.Sprintf("its runner got no job within its bound (job %d)", msg.Job.ID))
		if err != nil || !removed {
			return err
		}
		// The job it was made for may still wait: its runner never took it (another job took
		// the runner's place in GitHub's queue, or the runner was broken). It gets another.
		made, _, _ := names.ParseJobKey(msg.Key)
		return x.redispatch(ctx, made, msg.Key, jobs.Job{})
	}
	return nil
}

// removeWaiting deletes the runner of a claimed instance that is waiting for a job, and gives the
// instance back (its agent stops the runner, wipes and returns it); it reports whether it did.
// GitHub refuses to delete a busy runner: then it has just taken a job, and the instance goes
// running.
func (x *Dispatcher) removeWaiting(ctx context.Context, it *state.Instance, j jobs.Job, why string) (bool, error) {
	doc, err := x.pool(ctx, it.Pool)
	if err != nil {
		return false, err
	}
	if it.RunnerID != 0 && it.Installation != 0 {
		gh, err := x.d.GitHub(it.Installation, scopeOf(doc, it.Repo))
		if err != nil {
			return false, err
		}
		err = gh.DeleteRunner(ctx, it.RunnerID)
		switch {
		case ghapi.IsBusy(err):
			_, err := x.d.Pool.Store.Transition(ctx, state.Change{InstanceID: it.ID, Pool: it.Pool, From: it.State, To: state.Running,
				Version: it.Version, RunID: it.RunID, Threshold: x.d.Now().Add(doc.Timeout(state.Running)),
				Reason: "its runner is running a job"})
			if errors.Is(err, state.ErrConflict) {
				return false, nil
			}
			return false, err
		case err != nil:
			return false, err
		}
	}
	_, err = x.d.Pool.ToIdle(ctx, pool.Back{Instance: *it, Idle: doc.Timeout(state.Idle), RunID: it.RunID, Reason: why})
	if errors.Is(err, state.ErrConflict) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	x.d.Log.Info("removed a runner that waited in vain; its instance goes back", "instance", it.ID, "key", it.RunID,
		"job", j.ID, "reason", why)
	return true, nil
}

// unregister deletes a runner GitHub refused to delete earlier.
func (x *Dispatcher) unregister(ctx context.Context, msg jobs.Message) error {
	owner, repo, _ := cutScope(msg.Scope)
	return x.deleteRunner(ctx, msg.Job.Installation, ghapi.Scope{Owner: owner, Repo: repo}, msg.Job.RunnerID, msg.Round)
}

// deleteRunner deletes a runner; while GitHub says it is busy (its job has not yet been failed
// for the lost runner), it tries again later, within the configured rounds.
func (x *Dispatcher) deleteRunner(ctx context.Context, installation int64, scope ghapi.Scope, id int64, round int) error {
	gh, err := x.d.GitHub(installation, scope)
	if err != nil {
		return err
	}
	err = gh.DeleteRunner(ctx, id)
	switch {
	case err == nil:
		return nil
	case ghapi.IsBusy(err):
		if round >= x.cfg.UnregisterRounds {
			x.d.Log.Error("a runner stays busy after its instance let it go; left registered", "runner", id, "scope", scope.String())
			return nil
		}
		return x.send(ctx, []jobs.Message{{Kind: jobs.KindUnregister, Scope: scope.String(), Round: round + 1,
			Job: jobs.Job{Installation: installation, RunnerID: id}}}, []time.Duration{x.cfg.UnregisterEvery})
	}
	return err
}

// scheduleChecks sends each placed job's check, delayed by its bound (an instance created for
// the job and still booting then is looked at again every BootCheckEvery).
func (x *Dispatcher) scheduleChecks(ctx context.Context, doc *pooldoc.Document, placed []placement) {
	if len(placed) == 0 {
		return
	}
	msgs := make([]jobs.Message, len(placed))
	delays := make([]time.Duration, len(placed))
	for i, p := range placed {
		msgs[i] = jobs.Message{Kind: jobs.KindCheck, Job: p.job, InstanceID: p.instance.ID, Key: p.job.Key(), Version: p.instance.Version}
		delays[i] = x.bound(doc)
	}
	if err := x.send(ctx, msgs, delays); err != nil {
		// Without its check a runner that gets no job waits until the claimed deadline, when
		// refresh ends its instance: costly, not wrong.
		x.d.Log.Error("schedule the jobs' checks", "jobs", len(msgs), "error", err)
	}
}

// send puts messages on the jobs queue, each delayed by delays[i] (none when delays is nil; at
// most SQS's 15 minutes), ten to a request.
func (x *Dispatcher) send(ctx context.Context, msgs []jobs.Message, delays []time.Duration) error {
	_, err := x.sendEach(ctx, msgs, delays)
	return err
}

// sendEach is send, which also says which of msgs were not sent (their indices).
func (x *Dispatcher) sendEach(ctx context.Context, msgs []jobs.Message, delays []time.Duration) ([]int, error) {
	var (
		errs   []error
		failed []int
	)
	for start := 0; start < len(msgs); start += 10 {
		end := min(start+10, len(msgs))
		entries := make([]sqstypes.SendMessageBatchRequestEntry, 0, end-start)
		for i := start; i < end; i++ {
			body, err := msgs[i].Encode()
			if err != nil {
				errs, failed = append(errs, err), append(failed, i)
				continue
			}
			var delay time.Duration
			if delays != nil {
				delay = min(delays[i], maxDelay)
			}
			entries = append(entries, sqstypes.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(body),
				DelaySeconds: int32(delay / time.Second)})
		}
		if len(entries) == 0 {
			continue
		}
		out, err := x.d.SQS.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &x.cfg.JobsQueueURL, Entries: entries})
		if err != nil {
			errs = append(errs, fmt.Errorf("send to the jobs queue: %w", err))
			for _, e := range entries {
				i, _ := strconv.Atoi(aws.ToString(e.Id))
				failed = append(failed, i)
			}
			continue
		}
		for _, f := range out.Failed {
			errs = append(errs, fmt.Errorf("send to the jobs queue: entry %s: %s", aws.ToString(f.Id), aws.ToString(f.Message)))
			i, _ := strconv.Atoi(aws.ToString(f.Id))
			failed = append(failed, i)
		}
	}
	return failed, errors.Join(errs...)
}

// cutScope splits owner/name (or owner) into its parts.
func cutScope(scope string) (owner, repo string, isRepo bool) {
	owner, repo, isRepo = strings.Cut(scope, "/")
	return owner, repo, isRepo
}

// bound is how long a job's runner may wait for a job: Config.CheckAfter, or the pool's claimed
// timeout.
func (x *Dispatcher) bound(doc *pooldoc.Document) time.Duration {
	if x.cfg.CheckAfter > 0 {
		return x.cfg.CheckAfter
	}
	return doc.Timeout(state.Claimed)
}
