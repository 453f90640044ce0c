package provision

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
)

// pending returns the members not yet ready.
func (p *provisioning) pending() []*member {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*member
	for _, id := range p.order {
		if m := p.members[id]; !m.ready {
			out = append(out, m)
		}
	}
	return out
}

// wait waits until every pending instance is ready or has failed; it returns how many failed
// (they are given back or terminated, and dropped).
func (p *provisioning) wait(ctx context.Context) (int, error) {
	pending := p.pending()
	switch {
	case len(pending) == 0:
		return 0, nil
	case len(pending) == 1 && pending[0].reused && pending[0].ackWithin == state.AckTimeout:
		// One running instance claimed from the pool: its agent registers in well under a
		// second, so a few conditional writes beat reads and a write. An instance that must
		// boot first (created, or started from stopped) is read, which costs less per round.
		return p.waitOne(ctx, pending[0])
	}
	open, awaited := map[string]*member{}, map[string]state.Awaited{}
	for _, m := range pending {
		before := m.inst // the members change under the wait as they become ready
		open[m.inst.ID], awaited[m.inst.ID] = m, state.Awaited{Version: m.version, Before: &before}
	}
	var (
		failed  atomic.Int64
		taken   error
		running sync.WaitGroup // the moves to running, written while the reads go on
		err     error
	)
	// Once the agents are expected (their regMs says when), or once the first of them has
	// registered (instances launched together boot together), the rest are close behind: the
	// reads come twice as often from then on.
	interval := p.cfg.PollInterval
	d, informed := p.firstRead(pending, interval/2)
	if informed {
		interval /= 2
		if err := wait.Sleep(ctx, d); err != nil {
			return 0, p.waitErr(err, len(pending))
		}
	}
	for again := true; again; {
		again = false
		err = p.d.Pool.Store.Poll(ctx, slices.Collect(maps.Keys(open)), interval, func(items map[string]*state.Instance) (bool, time.Duration) {
			var (
				wg         sync.WaitGroup
				registered []registration
			)
			for id, m := range open {
				it, ok := items[id]
				if !ok {
					continue // not readable this time; the item exists (provision wrote it)
				}
				if err := p.takenBack(it); err != nil {
					taken = err
					continue
				}
				if it.SignalFor(state.SignalRegistered, p.cfg.RunID, m.version) {
					registered = append(registered, registration{m, it})
					delete(open, id)
					continue
				}
				if p.settle(ctx, &wg, m, it, &failed) {
					delete(open, id)
					continue
				}
				p.answerAsk(ctx, &wg, m, it)
			}
			if len(registered) > 0 {
				running.Go(func() { p.toRunning(ctx, registered, &failed) })
			}
			wg.Wait()
			if len(open) == 0 || taken != nil {
				return true, 0
			}
			if len(registered) > 0 && !informed {
				informed, again, interval = true, true, interval/2
				return true, 0
			}
			if !informed {
				return false, 0
			}
			plan := state.Registration
			return false, plan.Next(slices.Collect(maps.Keys(open)), awaited, items, plan.Expected(awaited, items, p.cfg.RunID), time.Now())
		})
	}
	running.Wait()
	if taken != nil {
		return int(failed.Load()), taken
	}
	return int(failed.Load()), p.waitErr(err, len(open))
}

// firstRead is how long to wait, before a poll at interval, to read pending first: until their
// agents are expected to have registered since the hand-overs began (state.Registration). It is
// not informed (zero) when one of them was created: it boots first.
func (p *provisioning) firstRead(pending []*member, interval time.Duration) (time.Duration, bool) {
	insts := make([]state.Instance, len(pending))
	for i, m := range pending {
		if !m.reused {
			return 0, false
		}
		insts[i] = m.inst
	}
	return state.Registration.First(insts, time.Since(p.handedAt), interval)
}

// waitErr says why a wait ended with open instances unregistered (nil when err is).
func (p *provisioning) waitErr(err error, open int) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("cancelled while %d of %d runners were still registering: %w", open, p.cfg.Count, err)
	default:
		return fmt.Errorf("%d of %d runners not registered within registration-timeout %s: %w",
			open, p.cfg.Count, p.cfg.RegistrationTimeout, err)
	}
}

// waitOne waits on a single instance without reading it: each round tries its move to running,
// conditional on its agent's REGISTERED for the run (state.Change.Registered). A write that wins
// is the whole wait; one that loses returns the item as it is, which is acted on as a read would
// be (a failure settled, an ask answered). The first try comes five eighths of a poll interval after the
// claim, when a live agent has had time to register.
func (p *provisioning) waitOne(ctx context.Context, m *member) (int, error) {
	var failed atomic.Int64
	backoff := wait.Backoff{Initial: max(p.cfg.PollInterval*5/8, time.Millisecond), Max: p.cfg.PollInterval, Factor: 1.5}
	change := p.runningChange(&m.inst, m.version)
	change.Registered = true
	var lastErr error
	for {
		if err := backoff.Sleep(ctx); err != nil {
			if lastErr != nil {
				err = fmt.Errorf("%w (last try: %w)", err, lastErr)
			}
			return int(failed.Load()), p.waitErr(err, 1)
		}
		change.Threshold = time.Now().Add(p.runtime)
		in, err := p.d.Pool.Store.Transition(ctx, change)
		var conflict *state.ConflictError
		switch {
		case err == nil:
			p.ready(m, in)
			return 0, nil
		case !errors.As(err, &conflict) || conflict.Current == nil:
			lastErr = err // a failed request: the next round tries again
			continue
		}
		it := conflict.Current
		if it.State == state.Running && it.RunID == p.cfg.RunID && it.Version == m.version+1 {
			p.ready(m, it) // our own write, whose answer was lost and retried by the SDK
			return 0, nil
		}
		var wg sync.WaitGroup
		if it.RunID != "" && it.RunID != p.cfg.RunID && it.State != state.Terminated {
			// Another run holds it now: the move to running was lost, as toRunning loses it, and
			// the instance is replaced. It is dropped as provision last held it, so the retirement's
			// condition fails and its holder keeps it.
			p.warn("%s could not be marked running: %v", it.ID, err)
			failed.Add(1)
			ours := m.inst
			ours.Version = m.version
			wg.Go(func() { p.drop(ctx, &ours, err.Error()) })
			wg.Wait()
			return int(failed.Load()), nil
		}
		if err := p.takenBack(it); err != nil {
			return 0, err
		}
		settled := p.settle(ctx, &wg, m, it, &failed)
		if !settled && it.Version != m.version {
			return 0, fmt.Errorf("%s moved to %s (version %d) while provision waited on version %d: %s", it.ID, it.State, it.Version, m.version, it.StateReason)
		}
		if !settled {
			p.answerAsk(ctx, &wg, m, it)
		}
		wg.Wait()
		if settled {
			return int(failed.Load()), nil
		}
	}
}

// runningChange is the move of the instance in (claimed or created, at version) to running.
func (p *provisioning) runningChange(in *state.Instance, version int64) state.Change {
	return state.Change{InstanceID: in.ID, Pool: in.Pool, From: in.State, To: state.Running, Version: version,
		RunID: p.cfg.RunID, Threshold: time.Now().Add(p.runtime), Reason: "runner registered for run " + p.cfg.RunID}
}

// ready records that m's instance is running as in says.
func (p *provisioning) ready(m *member, in *state.Instance) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m.inst, m.version, m.ready, m.readyAt = *in, in.Version, true, time.Since(p.start)
}

// takenBack returns an error saying why when an instance this provision holds is no longer
// held for its run, though not terminated (a failure, replaced): a release of the run gave it
// back, and the run's runners are no longer wanted. Provision stops at once rather than wait out
// its registration timeout for runners that will never register.
func (p *provisioning) takenBack(it *state.Instance) error {
	if it.State == state.Terminated || it.RunID == p.cfg.RunID {
		return nil
	}
	holder := "no run"
	if it.RunID != "" {
		holder = "run " + it.RunID
	}
	return fmt.Errorf("%s is no longer held for run %s (it is %s, holding %s: %s): a release of the run took it back, so no runner is wanted any more",
		it.ID, p.cfg.RunID, it.State, holder, it.StateReason)
}

// answerAsk hands the token over again when the member's agent has asked for it (state.Agent.Ask:
// it restarted, or the doorbell lost the message) since provision last answered, up to the
// agent's own bound on asks. The agent asks about the assignment's version; an ask about another
// version is not this provision's to answer.
func (p *provisioning) answerAsk(ctx context.Context, wg *sync.WaitGroup, m *member, it *state.Instance) {
	if p.handOnAck(ctx, wg, m, it) {
		return
	}
	if it.AskVersion != m.version || it.Asks <= m.answered || m.answered >= maxAnswers {
		return
	}
	m.answered = it.Asks
	p.d.Log.Info("the agent asked for the registration token again; handing it over", "instance", it.ID, "asks", it.Asks)
	wg.Go(func() { p.d.Pool.HandOver(ctx, p.d.Doc, []*state.Instance{it}, p.secret) })
}

// handOnAck hands the token to an instance provision created once its agent has acknowledged the
// assignment, when provision may not make doorbells (doorbell.Bells.Manages): the agent makes its
// own doorbell as it boots, before it acknowledges anything, so the doorbell is there now and
// was not when the instance was launched. It reports whether it handed over.
func (p *provisioning) handOnAck(ctx context.Context, wg *sync.WaitGroup, m *member, it *state.Instance) bool {
	if m.reused || m.handed || p.d.Pool.Bells.Manages || it.AckVersion < m.version || it.RunID != p.cfg.RunID {
		return false
	}
	m.handed = true
	p.d.Log.Info("the agent is up and has made its doorbell; handing the registration token over", "instance", it.ID)
	wg.Go(func() { p.d.Pool.HandOver(ctx, p.d.Doc, []*state.Instance{it}, p.secret) })
	return true
}

// maxAnswers bounds how often provision hands one instance its token again.
const maxAnswers = 5

// registration is a member whose agent has registered its runner, and the item that says so.
type registration struct {
	m  *member
	it *state.Instance
}

// settle acts on one pending, unregistered instance's item: failed ones are dropped (in wg). It
// reports whether the instance is settled.
func (p *provisioning) settle(ctx context.Context, wg *sync.WaitGroup, m *member, it *state.Instance, failed *atomic.Int64) bool {
	id := it.ID
	switch {
	case it.SignalFor(state.SignalRegisterFailed, p.cfg.RunID, m.version):
		failed.Add(1)
		p.warn("%s could not register its runner: %s", id, state.LastLine(it.SignalLog))
		wg.Go(func() { p.drop(ctx, it, "runner registration failed") })
	case it.Signal == state.SignalFailed || it.Signal == state.SignalSpotInterrupted || it.State == state.Terminated:
		failed.Add(1)
		reason := "its agent reported " + string(it.Signal)
		if it.State == state.Terminated {
			reason = "terminated meanwhile: " + it.StateReason
		}
		p.warn("%s failed: %s %s", id, reason, state.LastLine(it.SignalLog))
		wg.Go(func() { p.drop(ctx, it, reason) })
	case !m.ackBy.IsZero() && it.AckVersion < m.version && p.d.Now().After(m.ackBy):
		// A live agent acknowledges the claim's version within a second of it. This one has
		// not: crashed, stuck or cut off. Replace it now rather than fail the whole provision
		// at the registration timeout.
		failed.Add(1)
		reason := fmt.Sprintf("its agent showed no sign of life within %s of the claim (last heartbeat %s)",
			m.ackWithin, heartbeatText(it.HeartbeatAt))
		p.warn("%s replaced: %s", id, reason)
		wg.Go(func() { p.drop(ctx, it, reason) })
	default:
		return false
	}
	return true
}

func heartbeatText(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

// toRunning moves the instances registered in one round to running, in one request (a
// transaction: state.Store.TransitionAll); one that cannot be moved is dropped, and replaced.
func (p *provisioning) toRunning(ctx context.Context, regs []registration, failed *atomic.Int64) {
	if len(regs) == 0 {
		return
	}
	changes := make([]state.Change, len(regs))
	befores := make([]state.Instance, len(regs))
	for i, r := range regs {
		changes[i] = p.runningChange(r.it, r.it.Version)
		befores[i] = *r.it
	}
	var wg sync.WaitGroup
	for i, w := range p.d.Pool.Store.TransitionAll(ctx, changes, befores) {
		r := regs[i]
		if w.Err != nil {
			p.warn("%s registered but could not be marked running: %v", r.it.ID, w.Err)
			failed.Add(1)
			wg.Go(func() { p.drop(ctx, r.it, w.Err.Error()) })
			continue
		}
		p.ready(r.m, w.Item)
	}
	wg.Wait()
}
