package offers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// Claimer is the state-store writes a selector claims instances with; *state.Store satisfies it.
// The claims of one receive go in one TransitionAll.
type Claimer interface {
	Transition(ctx context.Context, c state.Change) (*state.Instance, error)
	TransitionAll(ctx context.Context, changes []state.Change, befores []state.Instance) []state.Written
}

// Defaults of a Selector.
const (
	DefaultWait       = time.Second
	DefaultVisibility = 30 * time.Second
	DefaultWorkers    = 10
	// cleanupTimeout bounds the deletes and releases a selection makes after its context ends.
	cleanupTimeout = 10 * time.Second
)

// Selector claims instances from one pool for requests. It is safe for concurrent use; claims of
// concurrent selections never overlap (the state store's conditional write decides).
type Selector struct {
	Queue *Queue
	Store Claimer
	// Wait is the long-poll wait of a receive (whole seconds; DefaultWait when 0). Each receive
	// first asks without waiting; one that gets nothing reads the queue's counts, and only when
	// they show offers (visible, or held by other claimers who may give them back) does it wait
	// this long for them. A pool with nothing offered costs no wait at all; a receive that waits
	// and gets nothing ends the selection: the pool has nothing more.
	Wait time.Duration
	// Visibility is how long received messages stay hidden while being claimed (DefaultVisibility
	// when 0). Messages not used are given back sooner, when the selection ends.
	Visibility time.Duration
	// Workers bounds the claims in flight at once (DefaultWorkers when 0).
	Workers int
	// Now is the clock deadlines are checked against; time.Now when nil.
	Now func() time.Time
	// Log receives one line per poison or failed message; slog.Default() when nil.
	Log *slog.Logger
}

// Stats counts what a selection saw.
type Stats struct {
	Receives int // ReceiveMessage requests
	Counts   int // GetQueueAttributes requests: a receive found nothing without waiting
	Received int // messages received
	Claimed  int // claims won
	Lost     int // claims lost: the instance had moved on (stale message, deleted)
	Stale    int // messages dropped without a claim: past their deadline or superseded
	Poison   int // messages moved to the dead-letter queue
	Returned int // messages given back for other requests
}

// Result is what a selection claimed.
type Result struct {
	// Instances are the claimed instances as written (state claimed, the request's run), hot
	// ones first. A claim made alone holds the item the write returned; one of a batch holds
	// the fields its offer carries (Message.Instance) with the claim applied.
	Instances []*state.Instance
	// Stopped are the ids of the claimed instances that were stopped: the caller starts them.
	Stopped []string
	Stats   Stats
}

type received struct {
	handle string
	msg    Message
}

// selection is the state of one Claim call.
type selection struct {
	*Selector
	req     Request
	res     Result
	seen    map[string]int64 // instance id → highest message version seen
	drop    []string         // receipt handles to delete: won or stale
	give    []string         // receipt handles to give back (visibility 0)
	stopped []received       // fitting stopped instances, claimed only if hot ones run out
	errs    []error
}

// Claim claims up to req.Count instances of the pool that fit req, preferring running (hot)
// instances to stopped ones. It returns fewer when the pool has no more that fit; the caller
// creates the rest. On error the Result still holds every instance won, which the caller owns.
func (s *Selector) Claim(ctx context.Context, req Request) (Result, error) {
	res, tidy, err := s.ClaimAsync(ctx, req)
	tidy()
	return res, err
}

// ClaimAsync is Claim that returns as soon as the claims are written: the messages it received
// are given back (those it did not need) and deleted (those it used) meanwhile, and tidy waits
// until that is done. The caller calls tidy once, before it exits; the instances are its own at
// once (a used message deleted late is at worst a stale hint, which the next claimer's
// conditional write loses and deletes).
func (s *Selector) ClaimAsync(ctx context.Context, req Request) (res Result, tidy func(), err error) {
	if err := req.Validate(); err != nil {
		return Result{}, func() {}, fmt.Errorf("claim from pool %s: %w", s.Queue.pool, err)
	}
	for _, m := range req.Given {
		if err := m.validate(s.Queue.pool); err != nil {
			return Result{}, func() {}, fmt.Errorf("claim from pool %s: the offer given of %s: %w", s.Queue.pool, m.InstanceID, err)
		}
	}
	sel := &selection{Selector: s, req: req, seen: map[string]int64{}}
	sel.run(ctx)

	for _, r := range sel.stopped {
		sel.give = append(sel.give, r.handle)
	}
	// The offers given were received from no queue: nothing to give back or delete.
	sel.give = slices.DeleteFunc(sel.give, func(h string) bool { return h == "" })
	sel.drop = slices.DeleteFunc(sel.drop, func(h string) bool { return h == "" })
	sel.res.Stats.Returned += len(sel.give)
	done := make(chan struct{})
	// Give back and delete even when ctx has ended: held messages would otherwise stay hidden
	// for the visibility timeout, and won ones would come back as stale hints.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	go func() {
		defer close(done)
		defer cancel()
		if err := s.Queue.releaseBatch(cctx, sel.give); err != nil {
			s.log().Warn("give messages back to the pool", "pool", s.Queue.pool, "error", err)
		}
		if err := s.Queue.deleteBatch(cctx, sel.drop); err != nil {
			// A message left behind is a stale hint: the next claimer's conditional write loses
			// and deletes it. Not worth failing the claim for.
			s.log().Warn("delete used messages", "pool", s.Queue.pool, "error", err)
		}
	}()
	tidy = func() { <-done }
	if len(sel.errs) > 0 {
		return sel.res, tidy, fmt.Errorf("claim from pool %s: %w", s.Queue.pool, errors.Join(sel.errs...))
	}
	return sel.res, tidy, nil
}

func (s *Selector) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

func (s *Selector) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (sel *selection) need() int { return sel.req.Count - len(sel.res.Instances) }

func (sel *selection) run(ctx context.Context) {
	if len(sel.req.Given) > 0 {
		var hot []received
		for _, m := range sel.req.Given {
			if c, ok := sel.sort(ctx, received{msg: m}); ok {
				hot = append(hot, c)
			}
		}
		sel.claim(ctx, hot[:min(sel.need(), len(hot))])
	}
	for sel.need() > 0 && len(sel.errs) == 0 {
		msgs, got, err := sel.receive(ctx)
		if err != nil {
			sel.errs = append(sel.errs, err)
			return
		}
		if got == 0 {
			break // a long poll found nothing: the pool has no more for us
		}
		var hot []received
		for _, r := range msgs {
			if c, ok := sel.sort(ctx, r); ok {
				hot = append(hot, c)
			}
		}
		n := min(sel.need(), len(hot))
		for _, r := range hot[n:] {
			sel.give = append(sel.give, r.handle) // fits, but not needed: others may want it
		}
		sel.claim(ctx, hot[:n])
	}
	if n := min(sel.need(), len(sel.stopped)); n > 0 && len(sel.errs) == 0 {
		use := sel.stopped[:n]
		sel.stopped = sel.stopped[n:]
		sel.claim(ctx, use)
	}
}

// receive returns the usable messages of one receive and how many arrived in all (poison ones
// included). It asks without waiting first; when that finds nothing and the queue's counts show
// no offer at all, the pool is empty and it says so at once (0 arrived). Nothing is ever received
// by a request that is then abandoned, so no offer is hidden from the next claimer: one that
// arrives after the counts were read is found by the next claim.
func (sel *selection) receive(ctx context.Context) ([]received, int, error) {
	out, err := sel.receiveWaiting(ctx, 0)
	if err != nil || len(out.Messages) > 0 {
		return sel.parse(ctx, out, err)
	}
	sel.res.Stats.Counts++
	visible, inFlight, err := sel.Queue.counts(ctx)
	if err != nil {
		return nil, 0, err
	}
	if visible == 0 && inFlight == 0 {
		return nil, 0, nil
	}
	wait := sel.Wait
	if wait == 0 {
		wait = DefaultWait
	}
	out, err = sel.receiveWaiting(ctx, wait)
	return sel.parse(ctx, out, err)
}

// receiveWaiting is one ReceiveMessage that long-polls up to wait (none when 0).
func (sel *selection) receiveWaiting(ctx context.Context, wait time.Duration) (*sqs.ReceiveMessageOutput, error) {
	vis := sel.Visibility
	if vis == 0 {
		vis = DefaultVisibility
	}
	// Ask for exactly what is still needed: a surplus would only be handed back (a request) and
	// hidden meanwhile from concurrent claimers. Messages that do not fit make another receive.
	max := int32(min(sqsBatch, sel.need()))
	out, err := sel.Queue.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:            &sel.Queue.url,
		MaxNumberOfMessages: max,
		WaitTimeSeconds:     int32((wait + time.Second - 1) / time.Second),
		VisibilityTimeout:   int32((vis + time.Second - 1) / time.Second),
	})
	sel.res.Stats.Receives++
	if err != nil {
		return nil, fmt.Errorf("receive from pool %s: %w", sel.Queue.pool, err)
	}
	return out, nil
}

// parse sorts the messages of a receive into usable ones and poison ones (moved aside).
func (sel *selection) parse(ctx context.Context, out *sqs.ReceiveMessageOutput, err error) ([]received, int, error) {
	if err != nil {
		return nil, 0, err
	}
	msgs := make([]received, 0, len(out.Messages))
	for _, m := range out.Messages {
		sel.res.Stats.Received++
		body, handle := aws.ToString(m.Body), aws.ToString(m.ReceiptHandle)
		parsed, err := ParseMessage(body, sel.Queue.pool)
		if err != nil {
			sel.poison(ctx, aws.ToString(m.MessageId), handle, body, err)
			continue
		}
		msgs = append(msgs, received{handle: handle, msg: parsed})
	}
	return msgs, len(out.Messages), nil
}

// poison moves a message that can never be used to the dead-letter queue.
func (sel *selection) poison(ctx context.Context, id, handle, body string, reason error) {
	sel.res.Stats.Poison++
	sel.log().Error("poison message in pool queue; moved to the dead-letter queue",
		"pool", sel.Queue.pool, "messageId", id, "reason", reason)
	if err := sel.Queue.deadLetter(ctx, body, reason.Error()); err != nil {
		sel.log().Error("poison message not moved; it stays in the queue", "pool", sel.Queue.pool, "messageId", id, "error", err)
		sel.give = append(sel.give, handle)
		return
	}
	sel.drop = append(sel.drop, handle)
}

// sort files a parsed message: stale ones to drop, unfit ones to give back, stopped ones to
// keep for later; it returns a hot candidate.
func (sel *selection) sort(_ context.Context, r received) (received, bool) {
	m := r.msg
	if v, ok := sel.seen[m.InstanceID]; ok && m.Version <= v {
		sel.res.Stats.Stale++ // a duplicate delivery, or an older offer of the same instance
		sel.drop = append(sel.drop, r.handle)
		return r, false
	}
	sel.seen[m.InstanceID] = m.Version
	if !m.Deadline().After(sel.now()) {
		sel.res.Stats.Stale++
		sel.drop = append(sel.drop, r.handle)
		return r, false
	}
	if !sel.req.Fits(m) {
		sel.give = append(sel.give, r.handle)
		return r, false
	}
	if m.Stopped {
		sel.stopped = append(sel.stopped, r)
		return r, false
	}
	return r, true
}

// claim claims candidates: their assignments are made (Personalize) in parallel, at most
// Workers at once, then every claim goes in one request (state.Store.TransitionAll: a
// transaction of conditional writes, in which one lost condition never blocks the others; one
// candidate is a single write). Of two offers of one instance only the newer is claimed.
func (sel *selection) claim(ctx context.Context, cands []received) {
	cands = sel.newest(cands)
	workers := sel.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	type outcome struct {
		r      received
		assign state.Assignment
		made   bool // Personalize completed the assignment
		in     *state.Instance
		err    error
	}
	outs := make([]outcome, len(cands))
	ids := make([]string, len(cands))
	for i, r := range cands {
		outs[i] = outcome{r: r, assign: sel.req.Assign}
		ids[i] = r.msg.InstanceID
	}
	if sel.req.Considered != nil {
		sel.req.Considered(ids...)
	}
	if sel.req.Personalize != nil {
		sem := make(chan struct{}, workers)
		var wg sync.WaitGroup
		for i := range outs {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				o := &outs[i]
				if o.err = sel.req.Personalize(ctx, o.r.msg.InstanceID, &o.assign); o.err == nil {
					o.made = true
				}
			})
		}
		wg.Wait()
	}
	var (
		changes []state.Change
		befores []state.Instance
		at      []int // index into outs of each change
	)
	for i := range outs {
		o := &outs[i]
		if o.err != nil {
			continue
		}
		changes = append(changes, state.Change{
			InstanceID: o.r.msg.InstanceID, Pool: sel.Queue.pool, From: o.r.msg.State(), To: state.Claimed,
			Version: o.r.msg.Version, Assign: &o.assign, Home: sel.req.home(), Reuse: sel.req.Reuse, AliveSince: sel.req.AliveSince, Threshold: sel.req.ClaimDeadline,
			Reason: "claimed for " + names.Describe(o.assign.RunID),
		})
		befores = append(befores, o.r.msg.Instance())
		at = append(at, i)
	}
	if len(changes) > 0 {
		for k, w := range sel.Store.TransitionAll(ctx, changes, befores) {
			outs[at[k]].in, outs[at[k]].err = w.Item, w.Err
		}
	}
	for _, o := range outs {
		if in := sel.ownWin(o.r.msg, o.assign, o.err); in != nil {
			o.in, o.err = in, nil
		}
		if o.err != nil && o.made && sel.req.Unused != nil {
			sel.req.Unused(o.r.msg.InstanceID, o.assign)
		}
		switch {
		case o.err == nil:
			sel.res.Stats.Claimed++
			sel.res.Instances = append(sel.res.Instances, o.in)
			if o.r.msg.Stopped {
				sel.res.Stopped = append(sel.res.Stopped, o.in.ID)
			}
			sel.drop = append(sel.drop, o.r.handle)
		case unchanged(o.r.msg, o.err):
			// The offer is current but the claim's condition refused it: the reuse scope keeps
			// it from this run, or its agent's heartbeat is not fresh. The offer stays, for
			// runs it fits or for its agent's return; refresh terminates an instance whose
			// heartbeat stays stale.
			sel.give = append(sel.give, o.r.handle)
			sel.log().Debug("offer refused by the claim's condition", "pool", sel.Queue.pool, "instance", o.r.msg.InstanceID)
		case errors.Is(o.err, state.ErrConflict):
			// The instance moved on (claimed by someone else, expired, re-offered with a newer
			// version): this message is stale.
			sel.res.Stats.Lost++
			sel.drop = append(sel.drop, o.r.handle)
			sel.log().Debug("claim lost", "pool", sel.Queue.pool, "instance", o.r.msg.InstanceID, "reason", o.err)
		default:
			sel.give = append(sel.give, o.r.handle)
			sel.errs = append(sel.errs, o.err)
		}
	}
}

// newest keeps, of candidates offering the same instance, the one with the highest version (a
// transaction may touch an item once); the older offers are stale and dropped.
func (sel *selection) newest(cands []received) []received {
	best := make(map[string]int, len(cands))
	for i, r := range cands {
		if j, ok := best[r.msg.InstanceID]; !ok || r.msg.Version > cands[j].msg.Version {
			best[r.msg.InstanceID] = i
		}
	}
	if len(best) == len(cands) {
		return cands
	}
	out := make([]received, 0, len(best))
	for i, r := range cands {
		if best[r.msg.InstanceID] == i {
			out = append(out, r)
			continue
		}
		sel.res.Stats.Stale++
		sel.drop = append(sel.drop, r.handle)
	}
	return out
}

// ownWin recognises a claim that succeeded although it reported a conflict: the SDK retried a
// write whose first attempt had already been applied, and the retry's condition then failed
// against our own result. The conflict carries the item as it is; if that is exactly what our
// claim writes, the instance is ours.
func (sel *selection) ownWin(m Message, assign state.Assignment, err error) *state.Instance {
	var conflict *state.ConflictError
	if !errors.As(err, &conflict) || conflict.Current == nil {
		return nil
	}
	cur := conflict.Current
	if cur.State == state.Claimed && cur.RunID == assign.RunID && cur.ClaimID == assign.ClaimID &&
		cur.ClaimID != "" && cur.Version == m.Version+1 {
		return cur
	}
	return nil
}

// unchanged reports whether a lost claim found the instance just as the message offers it: then
// the condition that failed is the reuse scope's or the heartbeat's, not the offer's freshness.
func unchanged(m Message, err error) bool {
	var conflict *state.ConflictError
	if !errors.As(err, &conflict) || conflict.Current == nil {
		return false
	}
	cur := conflict.Current
	return cur.State == m.State() && cur.Version == m.Version && cur.RunID == ""
}
