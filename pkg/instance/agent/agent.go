package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
)

// Store is the agent's own item: package state's Agent satisfies it.
type Store interface {
	Get(ctx context.Context) (*state.Instance, error)
	Heartbeat(ctx context.Context, at time.Time) (*state.Instance, error)
	Signal(ctx context.Context, sig state.Signal) error
	Ack(ctx context.Context, version int64, at time.Time) error
	AckRead(ctx context.Context, run string, version int64, at time.Time) (*state.Instance, error)
	Ask(ctx context.Context, version int64, n int, at time.Time) error
}

// ErrTerminated is returned by Run once the agent has terminated (or powered off) its instance.
var ErrTerminated = errors.New("instance terminated by its agent")

// pollTimeout bounds one poll, so that a hung connection cannot stall the agent.
const pollTimeout = 5 * time.Second

// maxBackoff caps the wait between polls while DynamoDB fails.
const maxBackoff = 5 * time.Second

// readBackoff is the wait between reads of the item while they fail (or, at boot, while it does
// not exist yet): from twice the poll interval up to maxBackoff.
func (a *Agent) readBackoff() wait.Backoff {
	return wait.Backoff{Initial: 2 * a.cfg.PollInterval, Max: maxBackoff, Clock: a.Clock}
}

// Agent runs one instance. Create it with New and call Run once.
type Agent struct {
	cfg   Config
	store Store
	// mailbox holds the hand-overs (runner secrets) the doorbell brought, in memory only.
	mailbox *doorbell.Mailbox
	host    Host
	ec2     awsapi.AgentEC2
	md      Metadata
	log     *slog.Logger
	http    *http.Client

	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Clock passes the agent's waits (wait.Real when nil); a test that moves Now moves it too.
	Clock wait.Clock
	// Doorbell receives from the instance's doorbell (package doorbell); nil, or an item without
	// one, and the agent polls its item every PollInterval instead.
	Doorbell awsapi.AgentSQS

	// Returns is where the agent says it has finished a label-routed job (the stack's returns
	// queue, package jobs); nil, or a pool document without one, and the control plane learns it
	// from the job's completed webhook alone.
	Returns awsapi.AgentReturns

	rings chan struct{} // a ring since the last read of the item
	// rungAt is when the doorbell last rang, readAt when the item was last read, and wokeAt when
	// the cause of the read that ended a waitFor arose: a ring since the read before it, or the
	// read itself (Unix nanoseconds). From wokeAt the agent times how long it took to act on what
	// it read.
	rungAt, readAt, wokeAt atomic.Int64
	listener               *doorbell.Listener
	// ringGap is minRingGap: ringBurst reads brought forward by rings in any ringBurst × ringGap.
	ringGap time.Duration

	// jobServed is the key of the last label-routed job this agent served (or found served by the
	// agent before it): a job's runner serves one job, and is never started again. Owned by the
	// reuse loop, as is returning.
	jobServed string
	// acked is the assignment version the reuse loop's read acknowledged (readAssigned), which
	// serving it then does not acknowledge again; owned by the reuse loop.
	acked     int64
	returning returning
	// interrupted is a label-routed job an earlier agent was serving when it stopped (the item
	// may still assign it, or have let it go meanwhile): the scrub at start ended it; the reuse
	// loop signals it and returns the instance.
	interrupted string

	// progress is when the agent last came back to waiting on its item (it began a wait, or a
	// read found nothing to act on); moved is closed and replaced each time (both under
	// progressMu). The doorbell's listener holds its next poll until then after a hand-over.
	progressMu sync.Mutex
	progress   time.Time
	moved      chan struct{}

	deadline      atomic.Int64 // latest threshold seen, Unix ms (0: none yet)
	last          atomic.Pointer[state.Instance]
	draining      atomic.Bool // take no new work: spot interruption or failed init
	terminating   atomic.Bool
	lastHeartbeat time.Time // owned by the goroutine that polls
	pollMu        sync.Mutex
}

// New returns an agent for cfg (defaults applied, then validated) that keeps its item in store
// and serves runs on host; log is the wiring's, which names the component and the instance.
func New(cfg Config, store Store, host Host, ec2Client awsapi.AgentEC2, md Metadata, log *slog.Logger) (*Agent, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	if log == nil {
		log = slog.Default()
	}
	mailbox := doorbell.NewMailbox()
	mailbox.Refused = func(h doorbell.HandOver) {
		log.Error("refused a hand-over the control plane did not send: its secret is not the one the assignment names", "run", h.Run,
			"version", h.Version, "kind", h.Kind)
	}
	return &Agent{cfg: cfg, store: store, mailbox: mailbox, host: host, ec2: ec2Client, md: md, log: log, http: downloadClient(),
		rings: make(chan struct{}, 1), ringGap: minRingGap, moved: make(chan struct{})}, nil
}

func (a *Agent) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

func (a *Agent) clock() wait.Clock {
	if a.Clock != nil {
		return a.Clock
	}
	return wait.Real
}

// sleep waits d on the agent's clock, or until ctx ends (returning its error).
func (a *Agent) sleep(ctx context.Context, d time.Duration) error { return a.clock().Sleep(ctx, d) }

// timer passes d on the agent's clock in the background: slept is closed once it has, unless
// stop (or the end of ctx) came first. Call stop either way.
func (a *Agent) timer(ctx context.Context, d time.Duration) (slept <-chan struct{}, stop func()) {
	ctx, stop = context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		if a.clock().Sleep(ctx, d) == nil {
			close(done)
		}
	}()
	return done, stop
}

// Run runs the agent until ctx ends (a graceful stop: the runner is stopped, nothing is
// deregistered) or the agent terminates its instance (ErrTerminated).
func (a *Agent) Run(ctx context.Context) error {
	item, err := a.boot(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { a.watchdog(ctx) })
	wg.Go(func() { a.watchSpot(ctx) })
	if url := a.ownDoorbell(ctx, item.Bell); url != "" {
		a.listener = &doorbell.Listener{SQS: a.Doorbell, URL: url, Wait: a.cfg.DoorbellWait, Log: a.log, Mailbox: a.mailbox,
			Settle: a.settled}
		wg.Go(func() { a.listener.Listen(ctx, a.ring) })
		a.log.Info("listening to the doorbell", "url", url)
	} else {
		a.log.Warn("no doorbell: polling the item; no runner secret can reach this instance, so it serves no run", "every", a.cfg.PollInterval)
	}

	if err := a.init(ctx); err != nil {
		a.draining.Store(true)
		a.log.Error("init failed; this instance takes no work and will be terminated", "error", err)
		// Idle until the control plane (or the deadline) ends the instance.
		_, werr := a.waitFor(ctx, func(*state.Instance) bool { return false }, nil)
		return werr
	}
	return a.loop(ctx)
}

// boot waits for the instance's item: provision and refresh write it right after launch, but the
// instance may boot first. No item within BootWait makes the instance an orphan, and it goes.
func (a *Agent) boot(ctx context.Context) (*state.Instance, error) {
	limit := a.now().Add(a.cfg.BootWait)
	backoff := a.readBackoff()
	for attempt := 0; ; attempt++ {
		item, err := a.poll(ctx)
		if err == nil {
			a.log.Info("item found", "state", item.State, "version", item.Version)
			return item, nil
		}
		if !errors.Is(err, state.ErrNotFound) && attempt%10 == 0 {
			a.log.Warn("read own item", "error", err)
		}
		if a.now().After(limit) {
			return nil, a.terminate(ctx, fmt.Sprintf("no item for this instance within %s of boot: an orphan", a.cfg.BootWait))
		}
		if err := backoff.Sleep(ctx); err != nil {
			return nil, err
		}
	}
}

// ownDoorbell makes the instance's doorbell unless it exists (an instance a workflow's step
// launched has none yet) and returns its URL, which the agent names itself from its stack and
// id, as the control plane does; "" when the stack has none (the item names no bell). The item's
// bell, which more roles than the instance's may write, is only compared. A doorbell that cannot
// be made is listened to anyway: the listener falls back to polling if it is not there, or not
// the instance's to receive from.
func (a *Agent) ownDoorbell(ctx context.Context, bell string) string {
	if a.Doorbell == nil || bell == "" {
		return ""
	}
	p := a.cfg.Pool
	url, err := doorbell.Own(ctx, a.Doorbell, doorbell.StackOf(p.QueueURL, p.Name), p.QueueURL, a.cfg.Identity.InstanceID, a.cfg.Identity.ARN())
	switch {
	case url == "":
		a.log.Error("cannot name this instance's doorbell; polling the item instead", "error", err)
		return ""
	case err != nil:
		a.log.Warn("could not make the doorbell; listening to it anyway", "url", url, "error", err)
	}
	if bell != url {
		a.log.Error("the item names a doorbell that is not this instance's; listening to its own", "item", bell, "own", url)
	}
	return url
}

// poll reads the item (as a heartbeat when one is due: one request either way) and remembers its
// deadline.
func (a *Agent) poll(ctx context.Context) (*state.Instance, error) {
	return a.read(ctx, func(ctx context.Context, now time.Time) (*state.Instance, error) {
		if now.Sub(a.lastHeartbeat) < a.cfg.HeartbeatInterval {
			return a.store.Get(ctx)
		}
		// Due either way: a refused heartbeat is tried again an interval later, not on every
		// poll, and the poll falls back to a plain read so that the agent still sees its item.
		a.lastHeartbeat = now
		item, err := a.store.Heartbeat(ctx, now)
		if err != nil {
			a.log.Warn("heartbeat failed; reading the item instead", "error", err)
			return a.store.Get(ctx)
		}
		return item, nil
	})
}

// read is one read of the item by fetch (under pollMu, bounded by pollTimeout), which returns the
// item as it now is: the agent remembers when it read, the item and its deadline.
func (a *Agent) read(ctx context.Context, fetch func(context.Context, time.Time) (*state.Instance, error)) (*state.Instance, error) {
	a.pollMu.Lock()
	defer a.pollMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	now := a.now()
	a.readAt.Store(now.UnixNano())
	item, err := fetch(ctx, now)
	if err != nil {
		return nil, err
	}
	a.last.Store(item)
	if !item.Threshold.IsZero() {
		a.deadline.Store(item.Threshold.UnixMilli())
	}
	return item, nil
}

// ring records that the doorbell rang: the next read of the item is due now.
func (a *Agent) ring() {
	a.rungAt.Store(a.now().UnixNano())
	select {
	case a.rings <- struct{}{}:
	default: // a read is due already
	}
}

// interval is how long after one read of the item the next is due without a ring: with a working
// doorbell, a safety read every SafetyInterval (a ring lost, or a write that rings no one); without
// one, every PollInterval while taking work; IdlePollInterval once the agent takes no more work.
func (a *Agent) interval() time.Duration {
	if a.listener != nil && a.listener.Healthy() {
		return a.cfg.SafetyInterval
	}
	if a.draining.Load() {
		return a.cfg.IdlePollInterval
	}
	return a.cfg.PollInterval
}

// Rings bring reads of the item forward at once, ringBurst of them in any ringBurst × minRingGap;
// beyond that a ring waits, so a flood of rings costs at most five reads a second. A few rings
// close together are normal (a hand-over, a ring after it, the release a moment later) and must
// not wait out a gap meant for floods: an instance claimed or released right after a read would.
const (
	minRingGap = 200 * time.Millisecond
	ringBurst  = 3
)

// pause waits until next, or until a ring (when rings is set) but not before earliest, running
// hook (when set) at least every PollInterval meanwhile.
// It reports whether a ring ended the wait (at once, or at earliest).
func (a *Agent) pause(ctx context.Context, next, earliest time.Time, rings bool, hook func()) (bool, error) {
	ring := a.rings
	if !rings {
		ring = nil // backing off: a ring must not cut the backoff short
	}
	rung := false
	for {
		d := next.Sub(a.now())
		if d <= 0 {
			return rung, nil
		}
		if hook != nil {
			d = min(d, a.cfg.PollInterval)
		}
		slept, stop := a.timer(ctx, d)
		select {
		case <-ctx.Done():
			stop()
			return false, ctx.Err()
		case <-ring:
			stop()
			if !a.now().Before(earliest) {
				return true, nil
			}
			next, ring, rung = earliest, nil, true // rung too soon after the last read: read at earliest
			continue
		case <-slept:
			stop()
		}
		if hook != nil {
			hook()
		}
	}
}

// settleWait bounds how long the doorbell's listener waits for the agent to act on a hand-over.
const settleWait = 2 * time.Second

// settled returns once the agent has come back to waiting on its item since since (it acted on
// what the ring brought: registered, failed, or found nothing to do), after settleWait at most.
func (a *Agent) settled(ctx context.Context, since time.Time) {
	t := time.NewTimer(settleWait)
	defer t.Stop()
	for {
		a.progressMu.Lock()
		done, moved := a.progress.After(since), a.moved
		a.progressMu.Unlock()
		if done {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case <-moved:
		}
	}
}

// waiting records that the agent is back to waiting on its item.
func (a *Agent) waiting() {
	a.progressMu.Lock()
	defer a.progressMu.Unlock()
	a.progress = time.Now()
	if a.moved != nil {
		close(a.moved)
	}
	a.moved = make(chan struct{})
}

// waitFor reads the item until cond holds: when the doorbell rings, and otherwise every interval
// (see interval), backing off (jittered, capped) while DynamoDB fails. hook, when set, runs before
// every read and at least every PollInterval. A terminated or vanished item terminates the
// instance.
func (a *Agent) waitFor(ctx context.Context, cond func(*state.Instance) bool, hook func()) (*state.Instance, error) {
	return a.waitWith(ctx, a.poll, cond, hook)
}

// waitWith is waitFor reading the item with read.
func (a *Agent) waitWith(ctx context.Context, read func(context.Context) (*state.Instance, error), cond func(*state.Instance) bool,
	hook func()) (*state.Instance, error) {
	a.waiting()
	backoff := a.readBackoff()
	failures := 0
	next := a.now()
	ringReads := make([]time.Time, 0, ringBurst) // the last reads rings brought forward, oldest first
	for {
		var earliest time.Time
		if len(ringReads) == ringBurst {
			earliest = ringReads[0].Add(ringBurst * a.ringGap)
		}
		rung, err := a.pause(ctx, next, earliest, failures == 0, hook)
		if err != nil {
			return nil, err
		}
		if a.terminating.Load() {
			return nil, ErrTerminated
		}
		if hook != nil {
			hook()
		}
		start := a.now()
		if rung {
			if len(ringReads) == ringBurst {
				ringReads = append(ringReads[:0], ringReads[1:]...)
			}
			ringReads = append(ringReads, start)
		}
		woke := start.UnixNano()
		if at := a.rungAt.Load(); rung && at > a.readAt.Load() && at < woke {
			woke = at // a ring since the last read (not one left over from before it)
		}
		item, err := read(ctx)
		switch {
		case errors.Is(err, state.ErrNotFound):
			return nil, a.terminate(ctx, "the instance's item is gone")
		case err != nil:
			failures++
			if failures&(failures-1) == 0 { // 1, 2, 4, 8, …: log, but not every time
				a.log.Warn("cannot read own item; keeping the last deadline", "failures", failures, "error", err,
					"deadline", time.UnixMilli(a.deadline.Load()).UTC())
			}
			next = a.now().Add(backoff.Next())
			continue
		}
		if failures > 0 {
			a.log.Info("own item readable again", "after failures", failures)
			failures = 0
			backoff.Reset()
		}
		if item.State == state.Terminated {
			return nil, a.terminate(ctx, "the control plane marked this instance terminated")
		}
		if cond(item) {
			a.wokeAt.Store(woke)
			return item, nil
		}
		a.waiting()
		next = start.Add(a.interval())
	}
}

// signal writes sig about the item's latest version, re-reading and retrying when the item has
// moved on meanwhile (for signals not tied to one assignment).
func (a *Agent) signalLatest(ctx context.Context, sig state.Signal) error {
	var err error
	for range 3 {
		item := a.last.Load()
		if item == nil {
			if item, err = a.poll(ctx); err != nil {
				return err
			}
		}
		sig.Version, sig.At = item.Version, a.now()
		err = a.store.Signal(ctx, sig)
		if !errors.Is(err, state.ErrConflict) {
			break
		}
		if _, perr := a.poll(ctx); perr != nil {
			return perr
		}
	}
	if err != nil {
		return fmt.Errorf("signal %s: %w", sig.Name, err)
	}
	a.log.Info("signalled", "signal", sig.Name, "run", sig.Run)
	return nil
}
