package dispatch

import (
	"context"
	"slices"
	"strings"
	"sync"
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
	waitRetryFirst = 15 * time.Second
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
		m, delay := nextTry(q, since)
		body, err := m.Encode()
		if err == nil {
			err = x.d.Waiting.AddWaiter(ctx, state.Waiter{Pool: doc.Name, Key: q.job.Key(), Body: body, Since: since, Round: m.Round,
				Due: now.Add(delay)})
		}
		if err != nil {
			x.d.Log.Error("keep the job waiting for room; it is tried again", "job", q.job.ID, "pool", doc.Name, "error", err)
			failed = append(failed, q)
			continue
		}
		msgs = append(msgs, m)
		delays = append(delays, delay)
	}
	x.count(doc.Name, "JobsWaiting", len(msgs))
	if err := x.send(ctx, msgs, delays); err != nil {
		// The waiters stay: an instance coming back wakes them.
		x.d.Log.Warn("schedule the waiting jobs' next tries; they wait for an instance to come back", "pool", doc.Name, "error", err)
	}
	return messageIDs(failed)
}

// nextTry is the message of a waiting job's next try, the job waiting since since, and how long
// until it is due.
func nextTry(q queuedJob, since time.Time) (jobs.Message, time.Duration) {
	return jobs.Message{Kind: jobs.KindQueued, Job: q.job, Round: q.round + 1, WaitingSince: since, Spare: q.spare}, retryDelay(q.round)
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

// unwait readies a queued job to place. One that waited for room, or was placed again, is placed
// only if its key, of the message's round, is still on its pool's waiters (taken off with one
// conditional delete, so that a wake and a try never both place it); ok false means someone took
// it already.
func (x *Dispatcher) unwait(ctx context.Context, q queuedJob) (bool, error) {
	if !q.waited() {
		return true, nil
	}
	_, ok, err := x.d.Waiting.TakeWaiter(ctx, q.job.Pool, q.job.Key(), q.round)
	if err == nil && !ok {
		x.takenAlready(q)
	}
	return ok, err
}

// takenAlready logs a waiting job's message that finds its job taken off the waiters (placed by a
// wake, or cancelled).
func (x *Dispatcher) takenAlready(q queuedJob) {
	x.d.Log.Info("a waiting job's message finds it taken already", "job", q.job.ID, "key", q.job.Key(), "pool", q.job.Pool, "round", q.round)
}

// waitBehind keeps waiting, without a try, the jobs of a batch's tries that a job of the same
// pool and repository has waited longer than, and returns the others. Room goes to the job that
// has waited longest first (a wake; or its own try, which wakes the others into any room it
// finds to spare), so a try behind it would only count the cap again, some twenty queries under
// a full one. Only a job of the same repository holds a try back: an idle instance of the pool
// that another repository's job may not use (its reuse scope) is still claimed by this one's try.
// And only while its own try is on its way: one overdue by waitRetryMax (lost, or its placement
// failing for something other than the cap) or past MaxWait holds nothing back. Each job held
// back gets its next try, then moves to that round with one conditional write (none if a wake
// took it meanwhile: the try then finds nothing).
func (x *Dispatcher) waitBehind(ctx context.Context, arrived []queuedJob) []queuedJob {
	now := x.d.Now()
	var out []queuedJob
	tries := map[string][]queuedJob{}
	for _, q := range arrived {
		if q.since.IsZero() || q.round == 0 || now.Sub(q.since) > MaxWait {
			out = append(out, q)
			continue
		}
		tries[q.job.Pool] = append(tries[q.job.Pool], q)
	}
	for pool, list := range tries {
		head, err := x.d.Waiting.Waiters(ctx, pool, 1)
		if err != nil || len(head) == 0 || head[0].Due.IsZero() || now.After(head[0].Due.Add(waitRetryMax)) || now.Sub(head[0].Since) > MaxWait {
			out = append(out, list...)
			continue
		}
		h, err := jobs.Parse(head[0].Body)
		if err != nil {
			out = append(out, list...)
			continue
		}
		var behind []queuedJob
		for _, q := range list {
			if q.job.Key() == head[0].Key || !strings.EqualFold(q.job.Repo, h.Job.Repo) {
				out = append(out, q)
			} else {
				behind = append(behind, q)
			}
		}
		out = append(out, x.nextRound(ctx, pool, behind)...)
	}
	return out
}

// nextRound schedules the next tries of pool's waiting jobs behind, then moves each on to that
// round (waitBehind); it returns those it could not keep waiting, to be tried now.
func (x *Dispatcher) nextRound(ctx context.Context, pool string, behind []queuedJob) []queuedJob {
	if len(behind) == 0 {
		return nil
	}
	now := x.d.Now()
	msgs := make([]jobs.Message, len(behind))
	delays := make([]time.Duration, len(behind))
	for i, q := range behind {
		msgs[i], delays[i] = nextTry(q, q.since)
	}
	// Sent first: a try whose waiter then could not move on finds nothing to take.
	unsent, err := x.sendEach(ctx, msgs, delays)
	if err != nil {
		x.d.Log.Warn("schedule the next tries of jobs waiting behind others; they are tried now", "pool", pool, "jobs", len(unsent), "error", err)
	}
	var tryNow []queuedJob
	kept := 0
	for i, q := range behind {
		if slices.Contains(unsent, i) {
			tryNow = append(tryNow, q)
			continue
		}
		body, err := msgs[i].Encode()
		var ok bool
		if err == nil {
			ok, err = x.d.Waiting.NextRound(ctx, state.Waiter{Pool: pool, Key: q.job.Key(), Body: body, Since: q.since, Round: msgs[i].Round,
				Due: now.Add(delays[i])}, q.round)
		}
		switch {
		case err != nil:
			x.d.Log.Warn("keep a job waiting behind another; it is tried now", "job", q.job.ID, "pool", pool, "error", err)
			tryNow = append(tryNow, q)
		case !ok:
			x.takenAlready(q)
		default:
			kept++
		}
	}
	if kept > 0 {
		x.count(pool, "JobsWaiting", kept)
		x.d.Log.Info("jobs wait behind those that have waited longer", "pool", pool, "jobs", kept)
	}
	return tryNow
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

// wakeLook is how many waiters past those it needs a wake reads (oldest first): for ones an
// instance back in the pool may serve (its reuse scope lets only some repositories have it), and
// past those cancelled or taken meanwhile. wakeRounds bounds its reads, for instances whose
// waiters another wake took first.
const (
	wakeLook   = 10
	wakeRounds = 3
)

// wake places the jobs that have waited longest for room in doc's pool: instances came back to
// the pool (ins: idle, on no queue yet) or ended (rooms: room to create one each), and the pool
// stays work-conserving. Each instance back goes to the oldest waiting job it may serve, claimed
// with no queue between them (an offer would race every other claim, and the job would find the
// cap). It returns the ids of the instances it handed on (the others are the caller's to offer)
// and the room its creations left unused (the caller's to hand to waiting jobs in turn: a wake
// never wakes another itself). A job it took off the waiters and could not place waits again,
// with a try of its own.
func (x *Dispatcher) wake(ctx context.Context, doc *pooldoc.Document, ins []*state.Instance, rooms int) (map[string]bool, int) {
	took, spare := map[string]bool{}, 0
	if !doc.Capped() {
		return took, 0
	}
	tried := map[string]bool{}
	for round := 0; round < wakeRounds; round++ {
		var left []*state.Instance
		for _, in := range ins {
			if !took[in.ID] {
				left = append(left, in)
			}
		}
		if len(left) == 0 && rooms == 0 {
			break
		}
		ws, err := x.d.Waiting.Waiters(ctx, doc.Name, min(len(tried)+len(left)+rooms+wakeLook, 100))
		if err != nil {
			x.d.Log.Warn("read the jobs waiting for room; their own tries place them", "pool", doc.Name, "error", err)
			break
		}
		ws = slices.DeleteFunc(ws, func(w state.Waiter) bool { return tried[w.Key] })
		chosen := chooseWaiters(doc, ws, left, rooms)
		if len(chosen) == 0 {
			break
		}
		for _, w := range chosen {
			tried[w.Key] = true
		}
		qs := x.woken(doc, x.takeWaiters(ctx, doc, chosen))
		needed := x.unplaced(ctx, qs)
		if len(needed) == 0 {
			continue // taken or cancelled meanwhile: the next ones
		}
		rooms = max(rooms-max(len(needed)-len(left), 0), 0) // a room goes to one job, once
		failed, gave, room := x.placeInPool(ctx, doc, doc.Name, needed, &waking{given: left})
		x.waitAgain(ctx, doc, needed, failed)
		for id := range gave {
			took[id] = true
		}
		spare += room
	}
	return took, spare
}

// woken turns the waiters a wake took into the jobs to place.
func (x *Dispatcher) woken(doc *pooldoc.Document, taken []state.Waiter) []queuedJob {
	qs := make([]queuedJob, 0, len(taken))
	for _, w := range taken {
		msg, err := jobs.Parse(w.Body)
		if err != nil {
			x.d.Log.Error("a waiting job's message that is not one; dropped", "pool", doc.Name, "job", w.Key, "error", err)
			x.count(doc.Name, "JobsFailed", 1)
			continue
		}
		qs = append(qs, queuedJob{msg: Message{ID: "waiter/" + w.Key, Body: w.Body, Source: FromJobs, Receives: 1}, job: msg.Job,
			round: msg.Round, since: msg.WaitingSince, spare: msg.Spare})
		x.d.Log.Info("room in the pool: a waiting job is placed", "job", msg.Job.ID, "pool", doc.Name,
			"waited", x.d.Now().Sub(w.Since).Round(time.Millisecond))
	}
	return qs
}

// waitAgain puts back on the waiters, each with a try of its own, the jobs of a wake whose
// placement failed (failed: their message ids); one that cannot be kept waiting is sent as a
// queued job afresh, so that no job a wake took is ever lost with it.
func (x *Dispatcher) waitAgain(ctx context.Context, doc *pooldoc.Document, qs []queuedJob, failed []string) {
	if len(failed) == 0 {
		return
	}
	var again []queuedJob
	for _, q := range qs {
		if slices.Contains(failed, q.msg.ID) {
			again = append(again, q)
		}
	}
	lost := x.wait(ctx, doc, again)
	var msgs []jobs.Message
	for _, q := range again {
		if slices.Contains(lost, q.msg.ID) {
			msgs = append(msgs, jobs.Message{Kind: jobs.KindQueued, Job: q.job, Spare: q.spare})
		}
	}
	if err := x.send(ctx, msgs, nil); err != nil {
		x.d.Log.Error("send woken jobs that could not wait again; the sweep places them", "pool", doc.Name, "jobs", len(msgs), "error", err)
	}
}

// waking is what a wake places its jobs with: the idle instances back in the pool, on no queue,
// that they are given first.
type waking struct {
	given []*state.Instance
}

// chooseWaiters picks, of ws (oldest first), the oldest each instance of ins may serve (its
// pool's reuse scope and the repositories it served decide), then rooms more of the oldest left.
func chooseWaiters(doc *pooldoc.Document, ws []state.Waiter, ins []*state.Instance, rooms int) []state.Waiter {
	repos := make([]string, len(ws))
	for i, w := range ws {
		if msg, err := jobs.Parse(w.Body); err == nil {
			repos[i] = msg.Job.Repo
		}
	}
	used := make([]bool, len(ws))
	var out []state.Waiter
	for _, in := range ins {
		for i := range ws {
			if !used[i] && state.Reusable(doc.Reuse, in.ServedRepos, repos[i]) {
				used[i] = true
				out = append(out, ws[i])
				break
			}
		}
	}
	for i := range ws {
		if rooms == 0 {
			break
		}
		if !used[i] {
			used[i] = true
			out = append(out, ws[i])
			rooms--
		}
	}
	return out
}

// takeWaiters takes the waiters ws off doc's pool's waiters, at once, and returns those it took:
// another wake, or a job's own try, may have taken some first.
func (x *Dispatcher) takeWaiters(ctx context.Context, doc *pooldoc.Document, ws []state.Waiter) []state.Waiter {
	out := make([]*state.Waiter, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			taken, ok, err := x.d.Waiting.TakeWaiter(ctx, doc.Name, w.Key, state.AnyRound)
			if err != nil {
				x.d.Log.Warn("take a job off the waiters; its own try places it", "pool", doc.Name, "job", w.Key, "error", err)
			}
			if ok {
				out[i] = &taken
			}
		})
	}
	wg.Wait()
	var taken []state.Waiter
	for _, w := range out {
		if w != nil {
			taken = append(taken, *w)
		}
	}
	return taken
}
