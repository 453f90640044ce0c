package dispatch

import (
	"context"
	"slices"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
)

// A job the cap leaves no room for waits on its pool's waiters (state.Waiter): an instance that
// comes back to the pool, or ends, wakes the one that has waited longest at once (wake), and each
// waiting job also tries again on its own, a fresh delayed message each time (so that waiting
// burns none of the jobs queue's receives), less and less often.
const (
	// waitRetryFirst and waitRetryMax pace a waiting job's own tries: they cover room that
	// appears without an instance coming back here (one that ends, another pool's under the
	// stack's cap), so they need not be frequent.
	waitRetryFirst = 5 * time.Second
	waitRetryMax   = 2 * time.Minute
	// MaxWait is how long a job waits for room before it is given up (JobsFailed): GitHub keeps
	// it queued for a day, but an hour without room means the cap is wrong, and someone must be
	// told.
	MaxWait = time.Hour
)

// wait puts jobs the cap left out on their pool's waiters and schedules each one's next try. It
// returns the ids of the messages whose jobs could not be kept waiting (delivered again).
func (x *Dispatcher) wait(ctx context.Context, doc *pooldoc.Document, list []queuedJob) []string {
	now := x.d.Now()
	var failed []queuedJob
	var msgs []jobs.Message
	var delays []time.Duration
	for _, q := range list {
		since := q.since
		if since.IsZero() {
			since = now
		}
		if now.Sub(since) > MaxWait {
			x.d.Log.Error("job waited for room under the cap too long; given up", "job", q.job.ID, "repository", q.job.Repo,
				"pool", doc.Name, "waited", now.Sub(since).Round(time.Second))
			x.count(doc.Name, "JobsFailed", 1)
			continue
		}
		m := jobs.Message{Kind: jobs.KindQueued, Job: q.job, Round: q.round + 1, WaitingSince: since, Spare: q.spare}
		body, err := m.Encode()
		if err == nil {
			err = x.d.Waiting.AddWaiter(ctx, state.Waiter{Pool: doc.Name, Key: q.job.Key(), Body: body, Since: since, Round: m.Round})
		}
		if err != nil {
			x.d.Log.Error("keep the job waiting for room; it is tried again", "job", q.job.ID, "pool", doc.Name, "error", err)
			failed = append(failed, q)
			continue
		}
		msgs = append(msgs, m)
		delays = append(delays, retryDelay(q.round))
	}
	x.count(doc.Name, "JobsWaiting", len(msgs))
	if err := x.send(ctx, msgs, delays); err != nil {
		// The waiters stay: an instance coming back wakes them.
		x.d.Log.Warn("schedule the waiting jobs' next tries; they wait for an instance to come back", "pool", doc.Name, "error", err)
	}
	return messageIDs(failed)
}

// retryDelay is how long a job that has waited round times waits before its next try.
func retryDelay(round int) time.Duration {
	d := waitRetryFirst
	for range round {
		d *= 2
		if d >= waitRetryMax {
			return wait.Jitter(waitRetryMax)
		}
	}
	return wait.Jitter(d)
}

// unwait turns a queued message into the job to place. A message of a job that waited for room,
// or of a job placed again, is placed only if its key, of the message's round, is still on its
// pool's waiters (taken off with one conditional delete, so that a wake and a try never both
// place it); ok false means someone took it already.
func (x *Dispatcher) unwait(ctx context.Context, m Message, msg jobs.Message) (queuedJob, bool, error) {
	q := queuedJob{msg: m, job: msg.Job, round: msg.Round, since: msg.WaitingSince, spare: msg.Spare}
	if !q.waited() {
		return q, true, nil
	}
	_, ok, err := x.d.Waiting.TakeWaiter(ctx, msg.Job.Pool, msg.Job.Key(), msg.Round)
	if err == nil && !ok {
		x.d.Log.Info("a waiting job's message finds it taken already", "job", msg.Job.ID, "key", msg.Job.Key(), "pool", msg.Job.Pool,
			"round", msg.Round)
	}
	return q, ok, err
}

// putBack puts back on the waiters the jobs of failed (message ids) that unwait took off them:
// their messages are delivered again, and must find them there.
func (x *Dispatcher) putBack(ctx context.Context, queued []queuedJob, failed []string) {
	for _, q := range queued {
		if !q.waited() || !slices.Contains(failed, q.msg.ID) {
			continue
		}
		since := q.since
		if since.IsZero() {
			since = x.d.Now()
		}
		if err := x.d.Waiting.AddWaiter(ctx, state.Waiter{Pool: q.job.Pool, Key: q.job.Key(), Body: q.msg.Body, Since: since,
			Round: q.round}); err != nil {
			x.d.Log.Error("put a job that could not be placed back on the waiters; its message finds nothing to place",
				"job", q.job.ID, "key", q.job.Key(), "error", err)
		}
	}
}

// wakeLook bounds how many waiters one wake looks at for a job still to place: one that was
// cancelled meanwhile is skipped.
const wakeLook = 3

// wake places the job that has waited longest for room in doc's pool, if any: an instance just
// came back to the pool (or ended), and the pool stays work-conserving. A job that cannot be
// placed after all goes back on the waiters.
func (x *Dispatcher) wake(ctx context.Context, doc *pooldoc.Document) {
	if !doc.Capped() {
		return
	}
	ws, err := x.d.Waiting.Waiters(ctx, doc.Name, wakeLook)
	if err != nil {
		x.d.Log.Warn("read the jobs waiting for room; their own tries place them", "pool", doc.Name, "error", err)
		return
	}
	for _, w := range ws {
		taken, ok, err := x.d.Waiting.TakeWaiter(ctx, doc.Name, w.Key, state.AnyRound)
		if err != nil || !ok {
			continue // someone else woke it, or its own try took it
		}
		msg, err := jobs.Parse(taken.Body)
		if err != nil {
			x.d.Log.Error("a waiting job's message that is not one; dropped", "pool", doc.Name, "job", w.Key, "error", err)
			continue
		}
		q := queuedJob{msg: Message{ID: "waiter/" + w.Key, Body: taken.Body, Source: FromJobs, Receives: 1}, job: msg.Job,
			round: msg.Round, since: msg.WaitingSince, spare: msg.Spare}
		needed := x.unplaced(ctx, []queuedJob{q})
		if len(needed) == 0 {
			continue // cancelled: the next one
		}
		x.d.Log.Info("an instance came back: the longest waiting job is placed", "job", msg.Job.ID, "pool", doc.Name,
			"waited", x.d.Now().Sub(taken.Since).Round(time.Millisecond))
		if failed := x.placeNeeded(ctx, needed); len(failed) > 0 {
			if err := x.d.Waiting.AddWaiter(ctx, taken); err != nil {
				x.d.Log.Error("put a woken job back on the waiters; its own try places it", "job", w.Key, "error", err)
			}
		}
		return
	}
}
