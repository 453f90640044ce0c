package provision

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hangar-ci/hangar/pkg/state"
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
	if len(pending) == 0 {
		return 0, nil
	}
	ids := make([]string, len(pending))
	open := map[string]*member{}
	for i, m := range pending {
		ids[i] = m.inst.ID
		open[m.inst.ID] = m
	}
	var (
		failed atomic.Int64
		taken  error
	)
	err := p.d.Store.Poll(ctx, ids, p.cfg.PollInterval, func(items map[string]*state.Instance) bool {
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
		wg.Go(func() { p.toRunning(ctx, registered, &failed) })
		wg.Wait()
		return len(open) == 0 || taken != nil
	})
	if taken != nil {
		return int(failed.Load()), taken
	}
	if errors.Is(err, context.Canceled) {
		return int(failed.Load()), fmt.Errorf("cancelled while %d of %d runners were still registering: %w", len(open), p.cfg.Count, err)
	}
	if err != nil {
		return int(failed.Load()), fmt.Errorf("%d of %d runners not registered within registration-timeout %s: %w",
			len(open), p.cfg.Count, p.cfg.RegistrationTimeout, err)
	}
	return int(failed.Load()), nil
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
	if it.AskVersion != m.version || it.Asks <= m.answered || m.answered >= maxAnswers {
		return
	}
	m.answered = it.Asks
	p.d.Log.Info("the agent asked for the registration token again; handing it over", "instance", it.ID, "asks", it.Asks)
	wg.Go(func() { p.handOver(ctx, it) })
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
	case !m.ackBy.IsZero() && it.AckVersion < m.version && time.Now().After(m.ackBy):
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
	threshold := time.Now().Add(p.runtime)
	for i, r := range regs {
		changes[i] = state.Change{InstanceID: r.it.ID, Pool: r.it.Pool, From: r.it.State, To: state.Running,
			Version: r.it.Version, RunID: p.cfg.RunID, Threshold: threshold, Reason: "runner registered for run " + p.cfg.RunID}
		befores[i] = *r.it
	}
	var wg sync.WaitGroup
	for i, w := range p.d.Store.TransitionAll(ctx, changes, befores) {
		r := regs[i]
		if w.Err != nil {
			p.warn("%s registered but could not be marked running: %v", r.it.ID, w.Err)
			failed.Add(1)
			wg.Go(func() { p.drop(ctx, r.it, w.Err.Error()) })
			continue
		}
		p.mu.Lock()
		r.m.inst, r.m.version, r.m.ready, r.m.readyAt = *w.Item, w.Item.Version, true, time.Since(p.start)
		p.mu.Unlock()
	}
	wg.Wait()
}
