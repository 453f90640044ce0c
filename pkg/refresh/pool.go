package refresh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// poolRun is the refresh of one pool: its report, and its instances by what refresh does with
// them, as the phases below sort them.
type poolRun struct {
	*run
	doc *pooldoc.Document
	now time.Time
	rep PoolReport

	idle, stopped []state.Instance
	created       []state.Instance // warm instances being created (no run)
	warming       []state.Instance // of those, the ones not ready yet
}

// pool refreshes one pool: expire what overstays, read the warm sets, weed out what must go,
// promote what is ready, then bring the sets to the schedule's size.
func (r *run) pool(ctx context.Context, doc *pooldoc.Document) PoolReport {
	p := &poolRun{run: r, doc: doc, now: r.d.Now(), rep: PoolReport{Pool: doc.Name}}
	p.expire(ctx)
	if !p.readSets(ctx) {
		return p.rep
	}
	p.weedOut(ctx)
	p.promoteReady(ctx)
	p.rep.Target = doc.Warm.TargetAt(p.now)
	if doc.Drained {
		// Nothing kept warm: trimming to zero retires the idle and stopped instances, and those
		// still warming are retired once their agents are ready.
		p.rep.Target = pooldoc.Target{Schedule: "drained"}
	}
	p.stopForSchedule(ctx)
	p.fill(ctx)
	p.trimStopped(ctx)
	p.trimIdle(ctx)
	p.rep.Idle, p.rep.Stopped, p.rep.Warming = len(p.idle), len(p.stopped), len(p.warming)
	p.tidyOffers(ctx)
	return p.rep
}

// tidyOffers makes the pool's offers agree with the idle and stopped sets as this refresh leaves
// them (pool.Queue.Tidy): stale offers are deleted, instances without one are offered again.
// A dry run changes nothing and only reads the depth.
func (p *poolRun) tidyOffers(ctx context.Context) {
	if p.cfg.DryRun {
		if depth, err := p.d.Pools.Depth(ctx, p.doc.Name); err == nil {
			p.rep.Depth = depth
		}
		return
	}
	st, err := p.d.Pools.Tidy(ctx, p.doc.Name, slices.Concat(p.idle, p.stopped), p.d.Store)
	p.rep.Depth, p.rep.OffersDropped, p.rep.Reoffered = st.Visible, st.Dropped, st.Reoffered
	p.rep.ItemsRead += st.ItemsRead
	if st.Skipped == "" {
		// What is known to be left: more when the tidy read only a sample of a large queue.
		p.rep.Depth = max(st.Visible-st.Checked, 0) + st.Kept + st.Reoffered
	}
	if st.Dropped > 0 || st.Reoffered > 0 || st.Poison > 0 || st.Renewed > 0 {
		p.d.Log.Info("tidied the pool's offers", "pool", p.doc.Name, "checked", st.Checked, "dropped", st.Dropped,
			"reoffered", st.Reoffered, "renewed", st.Renewed, "poison", st.Poison)
	}
	if err != nil {
		p.errorf("%v", err)
	}
}

func (p *poolRun) errorf(format string, a ...any) {
	msg := fmt.Sprintf("pool %s: ", p.doc.Name) + fmt.Sprintf(format, a...)
	p.rep.Errors = append(p.rep.Errors, msg)
	p.fail("%s", msg)
}

// expire terminates past-deadline instances in every live state; only they are read.
func (p *poolRun) expire(ctx context.Context) {
	for _, st := range state.LiveStates {
		expired, err := p.d.Store.Expired(ctx, p.doc.Name, st, p.now)
		p.rep.ItemsRead += len(expired)
		if errors.Is(err, state.ErrBadItem) {
			p.errorf("%v", err) // reported; the others are handled
			err = nil
		}
		if err != nil {
			p.errorf("find expired %s instances: %v", st, err)
			continue
		}
		ended, err := p.terminate(ctx, expired, func(in state.Instance) string {
			return fmt.Sprintf("expired in %s (deadline %s)", in.State, in.Threshold.UTC().Format(time.RFC3339))
		})
		p.rep.Expired += len(ended)
		if err != nil {
			p.errorf("%v", err)
		}
		if p.cfg.DryRun {
			p.rep.Expired += len(expired)
		}
	}
}

// readSets reads the warm sets: idle, stopped and warm instances being created, without those
// that expired a moment ago (expire handled them, or, dry, is to) and without provision's
// instances in created, which serve a run.
func (p *poolRun) readSets(ctx context.Context) bool {
	read := func(st state.State) ([]state.Instance, bool) {
		items, err := p.d.Store.InPoolState(ctx, p.doc.Name, st)
		p.rep.ItemsRead += len(items)
		if errors.Is(err, state.ErrBadItem) {
			p.errorf("%v", err) // reported; the pool's other instances are served
			err = nil
		}
		if err != nil {
			p.errorf("read %s instances: %v", st, err)
			return nil, false
		}
		return slices.DeleteFunc(items, func(in state.Instance) bool { return !in.Threshold.After(p.now) }), true
	}
	var ok bool
	if p.idle, ok = read(state.Idle); !ok {
		return false
	}
	if p.stopped, ok = read(state.Stopped); !ok {
		return false
	}
	if p.created, ok = read(state.Created); !ok {
		return false
	}
	p.created = slices.DeleteFunc(p.created, func(in state.Instance) bool { return in.RunID != "" })
	return true
}

// weedOut terminates ghosts and failed, interrupted, unhealthy and outdated instances of the
// warm sets.
func (p *poolRun) weedOut(ctx context.Context) {
	gone, err := p.vanished(ctx, slices.Concat(p.idle, p.stopped, p.created))
	if err != nil {
		p.errorf("look up instances on EC2: %v", err)
	}
	for _, set := range []*[]state.Instance{&p.idle, &p.stopped, &p.created} {
		var bad []state.Instance
		reasons := map[string]string{}
		*set = slices.DeleteFunc(*set, func(in state.Instance) bool {
			why := p.unfit(p.doc, in, gone, p.now)
			if why != "" {
				bad, reasons[in.ID] = append(bad, in), why
			}
			return why != ""
		})
		if _, err := p.terminate(ctx, bad, func(in state.Instance) string { return reasons[in.ID] }); err != nil {
			p.errorf("%v", err)
		}
	}
}

// promoteReady moves warm instances whose agents are ready to idle; the rest are warming.
func (p *poolRun) promoteReady(ctx context.Context) {
	for _, in := range p.created {
		if in.Signal != state.SignalReady {
			p.warming = append(p.warming, in)
			continue
		}
		if idle := p.promote(ctx, p.doc, in, p.now); idle != nil {
			p.idle = append(p.idle, *idle)
		}
	}
}

// stopForSchedule stops idle instances the schedule wants stopped, most recently launched first
// (the freshest disks are worth keeping), of those whose agent has finished with its last run.
func (p *poolRun) stopForSchedule(ctx context.Context) {
	target := p.rep.Target
	toStop := min(target.Stopped-len(p.stopped), len(p.idle)-target.Hot)
	if toStop <= 0 {
		return
	}
	candidates := slices.DeleteFunc(slices.Clone(p.idle), func(in state.Instance) bool { return !finished(in) })
	slices.SortFunc(candidates, func(a, b state.Instance) int { return b.LaunchedAt.Compare(a.LaunchedAt) })
	moved := p.stop(ctx, p.doc, candidates[:min(toStop, len(candidates))], p.now)
	p.rep.Stops = len(moved)
	p.stopped = append(p.stopped, moved...)
	p.idle = slices.DeleteFunc(p.idle, func(in state.Instance) bool {
		return slices.ContainsFunc(moved, func(m state.Instance) bool { return m.ID == in.ID })
	})
}

// fill launches the warm instances the schedule misses, under the pool's launch lease, counting
// again under the lease: another refresh may have launched since the sets were read.
func (p *poolRun) fill(ctx context.Context) {
	target := p.rep.Target
	missing := target.Hot + target.Stopped - len(p.idle) - len(p.stopped) - len(p.warming)
	if missing <= 0 || !p.leased(ctx, p.doc) {
		return
	}
	defer p.unlease(ctx, p.doc)
	if fresh, err := p.warmingNow(ctx, p.doc, p.now, slices.Concat(p.idle, p.stopped)); err == nil {
		missing -= len(fresh) - len(p.warming)
		p.warming = fresh
	}
	if missing <= 0 {
		return
	}
	n, err := p.launch(ctx, p.doc, missing, p.now)
	p.rep.Launched = n
	switch {
	case errors.Is(err, pool.ErrAtCapacity):
		// The cap leaves no room for the warm pool: jobs come first, and the fill waits.
		p.d.Log.Info("the warm pool waits for room under the cap", "pool", p.doc.Name, "missing", missing, "launched", n, "why", err)
	case err != nil:
		p.errorf("launch %d warm instances: %v", missing, err)
	}
	p.warming = append(p.warming, make([]state.Instance, n)...)
}

// trimStopped terminates stopped instances beyond the schedule's count, oldest first.
func (p *poolRun) trimStopped(ctx context.Context) {
	target := p.rep.Target
	over := len(p.stopped) - target.Stopped
	if over <= 0 {
		return
	}
	slices.SortFunc(p.stopped, func(a, b state.Instance) int { return a.LaunchedAt.Compare(b.LaunchedAt) })
	trimmed := slices.Clone(p.stopped[:over])
	if _, err := p.terminate(ctx, trimmed, func(state.Instance) string {
		return fmt.Sprintf("more stopped instances than schedule %q wants (%d)", target.Schedule, target.Stopped)
	}); err != nil {
		p.errorf("%v", err)
	}
	// Ended, ended by someone else, or moved on: none is stopped at the version read any more
	// (one whose write failed still is, and the tidy reads its item to keep its offer). A dry
	// run changed nothing.
	if !p.cfg.DryRun {
		p.stopped = without(p.stopped, trimmed)
	}
}

// trimIdle terminates idle warm instances beyond the schedule's count, but only those that never
// served a run; the others age out by their idle deadline, so that a burst of released instances
// stays reusable.
func (p *poolRun) trimIdle(ctx context.Context) {
	target := p.rep.Target
	over := len(p.idle) - target.Hot
	if over <= 0 {
		return
	}
	unused := slices.DeleteFunc(slices.Clone(p.idle), func(in state.Instance) bool { return in.LastRunID != "" })
	slices.SortFunc(unused, func(a, b state.Instance) int { return a.LaunchedAt.Compare(b.LaunchedAt) })
	unused = unused[:min(over, len(unused))]
	if _, err := p.terminate(ctx, unused, func(state.Instance) string {
		return fmt.Sprintf("more idle warm instances than schedule %q wants (%d)", target.Schedule, target.Hot)
	}); err != nil {
		p.errorf("%v", err)
	}
	if !p.cfg.DryRun {
		p.idle = without(p.idle, unused) // as for trimStopped
	}
}

// without returns set without the instances of gone.
func without(set, gone []state.Instance) []state.Instance {
	return slices.DeleteFunc(set, func(in state.Instance) bool {
		return slices.ContainsFunc(gone, func(g state.Instance) bool { return g.ID == in.ID })
	})
}

// unfit says why an idle, stopped or warming instance must go ("" when it may stay).
func (r *run) unfit(doc *pooldoc.Document, in state.Instance, gone map[string]string, now time.Time) string {
	switch {
	case gone[in.ID] != "":
		return "its instance is " + gone[in.ID] + " on EC2"
	case in.Signal == state.SignalFailed:
		return "its agent failed: " + state.LastLine(in.SignalLog)
	case in.Signal == state.SignalSpotInterrupted:
		return "spot interruption"
	case in.State == state.Idle && in.Signal == state.SignalRegisterFailed:
		return "its last runner registration failed: " + state.LastLine(in.SignalLog)
	case doc.Drained && (in.State == state.Idle || in.State == state.Stopped):
		// Trimming to the drained target ends only the instances that never served a run; one
		// that did and slipped past the drain's mark must not wait out its idle deadline.
		return pooldoc.DrainedReason
	case in.SpecHash != "" && in.SpecHash != doc.SpecHash && in.State != state.Created:
		return fmt.Sprintf("outdated spec %s (the pool's is %s)", in.SpecHash, doc.SpecHash)
	case in.State == state.Idle && !in.HeartbeatAt.IsZero() && now.Sub(in.HeartbeatAt) > r.cfg.HeartbeatStale:
		return fmt.Sprintf("no heartbeat since %s", in.HeartbeatAt.UTC().Format(time.RFC3339))
	}
	return ""
}

// vanished returns the instances among insts that EC2 no longer has running or stopped, with
// their EC2 state ("missing" when EC2 does not know them).
func (r *run) vanished(ctx context.Context, insts []state.Instance) (map[string]string, error) {
	out := map[string]string{}
	if len(insts) == 0 {
		return out, nil
	}
	ids := make([]string, len(insts))
	for i, in := range insts {
		ids[i] = in.ID
	}
	seen := map[string]ec2types.InstanceStateName{}
	for start := 0; start < len(ids); start += 200 {
		chunk := ids[start:min(start+200, len(ids))]
		p := ec2.NewDescribeInstancesPaginator(r.d.Pool.EC2, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{Name: aws.String("instance-id"), Values: chunk}}})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return out, err
			}
			for _, res := range page.Reservations {
				for _, in := range res.Instances {
					seen[aws.ToString(in.InstanceId)] = in.State.Name
				}
			}
		}
	}
	for _, id := range ids {
		switch st, ok := seen[id]; {
		case !ok:
			out[id] = "missing"
		case st == ec2types.InstanceStateNameTerminated || st == ec2types.InstanceStateNameShuttingDown:
			out[id] = string(st)
		}
	}
	return out, nil
}

// promote moves a READY warm instance to idle and offers it to the pool.
func (r *run) promote(ctx context.Context, doc *pooldoc.Document, in state.Instance, now time.Time) *state.Instance {
	r.act(Action{Instance: in.ID, Pool: doc.Name, Do: "promote", Reason: "its agent is ready"})
	if r.cfg.DryRun {
		return &in
	}
	out, err := r.d.Pool.ToIdle(ctx, pool.Back{Instance: in, Idle: doc.Timeout(state.Idle), At: now, Reason: "warm and ready"})
	if err != nil {
		if !errors.Is(err, state.ErrConflict) {
			r.fail("pool %s: promote %s: %v", doc.Name, in.ID, err)
		}
		return nil
	}
	r.offer(ctx, doc.Name, out)
	return out
}

// offer offers warm instances (idle or stopped, never having served a run) to their pool.
func (r *run) offer(ctx context.Context, pool string, insts ...*state.Instance) {
	if err := r.d.Pool.Offer(ctx, insts...); err != nil {
		r.fail("pool %s: %v (they stay idle without an offer until their deadline)", pool, err)
	}
}

// stop stops idle instances for the stopped part of the warm pool. The conditional write comes
// first: idle → stopped, one per instance; only the instances whose write won go to EC2 (one
// request), and only then is the new offer published. A claim or a release that lands before the
// write makes it lose, and the instance is left running for whoever holds it now; a claim after it
// can only come through the new offer, which provision answers by starting the instance.
func (r *run) stop(ctx context.Context, doc *pooldoc.Document, idle []state.Instance, now time.Time) []state.Instance {
	for _, in := range idle {
		r.act(Action{Instance: in.ID, Pool: doc.Name, Do: "stop", Reason: "the schedule wants stopped warm instances"})
	}
	if r.cfg.DryRun {
		return idle
	}
	var moved []state.Instance
	var ids []string
	for _, in := range idle {
		out, err := r.d.Store.Transition(ctx, state.Change{InstanceID: in.ID, Pool: doc.Name, From: state.Idle, To: state.Stopped,
			Version: in.Version, Threshold: now.Add(doc.Timeout(state.Stopped)), Reason: "stopped warm instance"})
		if err != nil {
			if !errors.Is(err, state.ErrConflict) {
				r.fail("pool %s: record %s stopped: %v", doc.Name, in.ID, err)
			}
			continue // claimed or moved on meanwhile: not ours to stop
		}
		moved = append(moved, *out)
		ids = append(ids, out.ID)
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := r.d.Pool.EC2.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: ids}); err != nil {
		// Recorded stopped but still running: offered as stopped all the same, provision's start
		// of a running instance changes nothing, and the next refresh counts them as stopped.
		r.fail("pool %s: stop %d instances: %v", doc.Name, len(ids), err)
	}
	offers := make([]*state.Instance, len(moved))
	for i := range moved {
		offers[i] = &moved[i]
	}
	r.offer(ctx, doc.Name, offers...)
	return moved
}

// finished reports whether an idle instance's agent is done with every run it served: its last
// signal is READY (a fresh instance, or an agent that restarted and scrubbed the instance before
// saying so), or DEREGISTERED for its last run. Only such an instance may be stopped: stopping one
// that is still deregistering or cleaning would cut that short and offer it half clean.
func finished(in state.Instance) bool {
	if in.Signal == state.SignalReady {
		return true
	}
	return in.LastRunID != "" && in.Signal == state.SignalDeregistered && in.SignalRun == in.LastRunID
}

// warmingNow returns the pool's warm instances still being created (no run, within their
// deadline), but those counted already (a dry run's promotions, which leave them created). One
// whose agent is READY counts too: another refresh launched it after this one read the pool, and
// the next refresh promotes it.
func (r *run) warmingNow(ctx context.Context, doc *pooldoc.Document, now time.Time, counted []state.Instance) ([]state.Instance, error) {
	items, err := r.d.Store.InPoolState(ctx, doc.Name, state.Created)
	if err != nil && !errors.Is(err, state.ErrBadItem) {
		return nil, err
	}
	return slices.DeleteFunc(items, func(in state.Instance) bool {
		return in.RunID != "" || !in.Threshold.After(now) || slices.ContainsFunc(counted, func(c state.Instance) bool { return c.ID == in.ID })
	}), nil
}

// leaseTTL bounds how long one refresh holds a pool's launch lease.
const leaseTTL = 2 * time.Minute

// leased takes the pool's launch lease; another refresh holding it fills the deficit this round.
func (r *run) leased(ctx context.Context, doc *pooldoc.Document) bool {
	if r.cfg.DryRun {
		return true
	}
	ok, err := r.d.Store.Lease(ctx, r.leaseName(doc), r.holder, leaseTTL)
	if err != nil {
		r.fail("pool %s: %v", doc.Name, err)
		return false
	}
	if !ok {
		r.d.Log.Info("another refresh is filling this pool", "pool", doc.Name)
	}
	return ok
}

func (r *run) leaseName(doc *pooldoc.Document) string {
	return "launch/" + r.cfg.Stack + "/" + doc.Name
}

// unlease gives the pool's launch lease back once the launched instances are recorded.
func (r *run) unlease(ctx context.Context, doc *pooldoc.Document) {
	if r.cfg.DryRun {
		return
	}
	if err := r.d.Store.ReleaseLease(context.WithoutCancel(ctx), r.leaseName(doc), r.holder); err != nil {
		r.d.Log.Warn("release the launch lease; it runs out by itself", "pool", doc.Name, "error", err)
	}
}

// launch creates n warm instances (no run) in one request and records them.
func (r *run) launch(ctx context.Context, doc *pooldoc.Document, n int, now time.Time) (int, error) {
	r.act(Action{Pool: doc.Name, Do: "launch", Reason: fmt.Sprintf("%d warm instances missing", n)})
	if r.cfg.DryRun {
		return n, nil
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = now.Add(time.Minute)
	}
	return r.d.Pool.Warm(ctx, doc, n, now, fmt.Sprintf("hangar-warm-%s-%d", doc.Name, now.Unix()/60), deadline)
}
