package provision

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// drop gives a failed instance back or retires it, and forgets it. Only a claimed instance whose
// registration failed goes back to the pool, with the failure counted; at MaxRegisterFailures in a
// row it is terminated instead.
func (p *provisioning) drop(ctx context.Context, it *state.Instance, reason string) {
	p.mu.Lock()
	p.failed = append(p.failed, it.ID)
	p.res.Failures = append(p.res.Failures, Failure{ID: it.ID, Reason: reason, Log: it.SignalLog})
	delete(p.members, it.ID)
	p.order = slices.DeleteFunc(p.order, func(id string) bool { return id == it.ID })
	p.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	registerFailed := it.State == state.Claimed && it.Signal == state.SignalRegisterFailed
	if registerFailed && it.RegisterFailures+1 >= state.MaxRegisterFailures {
		reason = fmt.Sprintf("%s (%d registrations in a row failed)", reason, it.RegisterFailures+1)
	} else if registerFailed && pool.NotReusable(it, p.d.Doc) == "" {
		out, err := p.d.Pool.ToIdle(ctx, pool.Back{Instance: *it, Idle: p.d.Doc.Timeout(state.Idle), RunID: p.cfg.RunID, Reason: reason, RegisterFailed: true})
		if err == nil {
			if err := p.d.Pool.Offer(ctx, out); err != nil {
				p.warn("offer %s back to the pool: %v", it.ID, err)
			}
			return
		}
		p.warn("give %s back: %v; terminating it unless someone else holds it now", it.ID, err)
	}
	res := p.d.Pool.Retire(ctx, []state.Instance{*it}, pool.Because(reason))
	if res.Err != nil {
		p.warn("terminate %s: %v (refresh will retry)", it.ID, res.Err)
	}
	for _, lost := range res.Lost {
		p.warn("%s moved on before it could be terminated (%s): left alone", lost.ID, lost.Holder())
	}
}

// rollback gives back or terminates everything this provision took.
func (p *provisioning) rollback(cause error) {
	p.mu.Lock()
	ids := slices.Clone(p.order)
	p.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	p.d.Log.Error("provision failed; giving back what it took", "error", cause, "instances", len(ids))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	items, err := p.d.Pool.Store.GetMany(ctx, ids)
	if err != nil && !errors.Is(err, state.ErrBadItem) { // malformed items are left to refresh
		p.d.Log.Error("read the items to give them back; refresh will expire them", "step", "rollback", "error", err)
		return
	}
	var insts []state.Instance
	for _, id := range ids {
		it, ok := items[id]
		if !ok {
			continue
		}
		insts = append(insts, *it)
		if it.State != state.Running {
			f := Failure{ID: id, Reason: p.notReady(it)}
			if it.SignalRun == p.cfg.RunID {
				f.Log = it.SignalLog // a log of an earlier run says nothing of this one
			}
			p.mu.Lock()
			p.res.Failures = append(p.res.Failures, f)
			p.mu.Unlock()
		}
	}
	res := p.giveBack(ctx, insts)
	for _, w := range res.Warnings {
		p.d.Log.Warn(w, "step", "rollback")
	}
}

// notReady says where an instance stood when provision gave up on it: its state, its agent's
// last signal about this run (none yet, if it sent none), its last heartbeat.
func (p *provisioning) notReady(it *state.Instance) string {
	msg := fmt.Sprintf("not ready when provision stopped: %s", it.State)
	if it.Signal != "" && it.SignalRun == p.cfg.RunID {
		msg += ", last signal " + string(it.Signal)
	} else {
		msg += ", no signal about this run yet"
	}
	return msg + ", last heartbeat " + heartbeatText(it.HeartbeatAt)
}

// replaceEarlierAttempt gives back the instances an earlier attempt of the run left, so that no
// stale runner holds the label; this attempt gets fresh ones.
func (p *provisioning) replaceEarlierAttempt(ctx context.Context) {
	left, err := p.d.Pool.Store.ByRun(ctx, p.cfg.RunID)
	if err != nil && !errors.Is(err, state.ErrBadItem) { // malformed items are left to refresh
		p.warn("look for instances of earlier attempts: %v", err)
		return
	}
	earlier := slices.DeleteFunc(left, func(in state.Instance) bool { return in.RunAttempt >= p.cfg.RunAttempt })
	if len(earlier) == 0 {
		return
	}
	p.d.Log.Info("giving back the instances of earlier attempts", "count", len(earlier))
	res := p.giveBack(ctx, earlier)
	for _, w := range res.Warnings {
		p.warn("giving back an earlier attempt's instances: %s", w)
	}
}

// giveBack gives instances of the run back to the pool (pool.GiveBack), with their runners: a
// failed provision's, or an earlier attempt's. Runners of the run's other instances (another
// provision of the same run) are not touched.
func (p *provisioning) giveBack(ctx context.Context, insts []state.Instance) *pool.GivenBack {
	return p.d.Pool.GiveBack(ctx, pool.GiveBack{Run: p.cfg.RunID, Instances: insts, GitHub: p.d.GitHub,
		Names: state.RunnerNamesOf(p.cfg.Stack)})
}
