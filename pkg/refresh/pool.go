package refresh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hangar-ci/hangar/pkg/awserr"
	"github.com/hangar-ci/hangar/pkg/fleet"
	"github.com/hangar-ci/hangar/pkg/poolconfig"
	"github.com/hangar-ci/hangar/pkg/state"
)

func isNotFound(err error) bool { return awserr.Classify(err) == awserr.NotFound }

// pool refreshes one pool.
func (r *run) pool(ctx context.Context, doc *poolconfig.Document) PoolReport {
	rep := PoolReport{Pool: doc.Name}
	now := r.d.Now()
	errorf := func(format string, a ...any) {
		msg := fmt.Sprintf("pool %s: ", doc.Name) + fmt.Sprintf(format, a...)
		rep.Errors = append(rep.Errors, msg)
		r.fail("%s", msg)
	}

	// 1. Expiry, in every live state: only past-deadline items are read.
	for _, st := range state.LiveStates {
		expired, err := r.d.Store.Expired(ctx, doc.Name, st, now)
		rep.ItemsRead += len(expired)
		if err != nil {
			errorf("find expired %s instances: %v", st, err)
			continue
		}
		n, err := r.terminate(ctx, expired, func(in state.Instance) string {
			return fmt.Sprintf("expired in %s (deadline %s)", in.State, in.Threshold.UTC().Format(time.RFC3339))
		})
		rep.Expired += n
		if err != nil {
			errorf("%v", err)
		}
		if r.cfg.DryRun {
			rep.Expired += len(expired)
		}
	}

	// 2. The warm sets.
	sets := map[state.State][]state.Instance{}
	for _, st := range []state.State{state.Idle, state.Stopped, state.Created} {
		items, err := r.d.Store.InPoolState(ctx, doc.Name, st)
		rep.ItemsRead += len(items)
		if err != nil {
			errorf("read %s instances: %v", st, err)
			return rep
		}
		// Items expired a moment ago were handled above (or, dry, are to be).
		sets[st] = slices.DeleteFunc(items, func(in state.Instance) bool { return !in.Threshold.After(now) })
	}
	// Provision's instances in created serve a run: not refresh's to manage.
	sets[state.Created] = slices.DeleteFunc(sets[state.Created], func(in state.Instance) bool { return in.RunID != "" })

	// 3. Ghosts, failed, interrupted, unhealthy and outdated instances leave.
	gone, err := r.vanished(ctx, slices.Concat(sets[state.Idle], sets[state.Stopped], sets[state.Created]))
	if err != nil {
		errorf("look up instances on EC2: %v", err)
	}
	for st, items := range sets {
		var bad []state.Instance
		keep := items[:0:0]
		reasons := map[string]string{}
		for _, in := range items {
			if why := r.unfit(doc, in, gone, now); why != "" {
				bad, reasons[in.ID] = append(bad, in), why
			} else {
				keep = append(keep, in)
			}
		}
		sets[st] = keep
		if _, err := r.terminate(ctx, bad, func(in state.Instance) string { return reasons[in.ID] }); err != nil {
			errorf("%v", err)
		}
	}

	// 4. Warm instances whose agents are ready join the pool.
	var warming []state.Instance
	for _, in := range sets[state.Created] {
		if in.Signal == state.SignalReady {
			if idle := r.promote(ctx, doc, in, now); idle != nil {
				sets[state.Idle] = append(sets[state.Idle], *idle)
			}
			continue
		}
		warming = append(warming, in)
	}

	// 5. Sizes: the schedule's target.
	target := doc.Warm.TargetAt(now)
	rep.Target = target
	idle, stopped := sets[state.Idle], sets[state.Stopped]
	if toStop := min(target.Stopped-len(stopped), len(idle)-target.Hot); toStop > 0 {
		// Most recently launched first: the freshest disks are worth keeping.
		slices.SortFunc(idle, func(a, b state.Instance) int { return b.LaunchedAt.Compare(a.LaunchedAt) })
		moved := r.stop(ctx, doc, idle[:toStop], now)
		rep.Stops = len(moved)
		stopped = append(stopped, moved...)
		idle = idle[toStop:]
	}
	if missing := target.Hot + target.Stopped - len(idle) - len(stopped) - len(warming); missing > 0 && r.leased(ctx, doc) {
		// Recount under the lease: another refresh may have launched since the sets were read.
		if fresh, err := r.warming(ctx, doc, now); err == nil {
			missing -= len(fresh) - len(warming)
			warming = fresh
		}
		if missing > 0 {
			n, err := r.launch(ctx, doc, missing, now)
			rep.Launched = n
			if err != nil {
				errorf("launch %d warm instances: %v", missing, err)
			}
			warming = append(warming, make([]state.Instance, n)...)
		}
		r.unlease(ctx, doc)
	}
	// Excess: only warm instances that never served a run; the others age out by their idle
	// deadline, so that a burst of released instances stays reusable.
	if over := len(stopped) - target.Stopped; over > 0 {
		slices.SortFunc(stopped, func(a, b state.Instance) int { return a.LaunchedAt.Compare(b.LaunchedAt) })
		n, err := r.terminate(ctx, stopped[:over], func(state.Instance) string {
			return fmt.Sprintf("more stopped instances than schedule %q wants (%d)", target.Schedule, target.Stopped)
		})
		if err != nil {
			errorf("%v", err)
		}
		stopped = stopped[n:]
	}
	if over := len(idle) - target.Hot; over > 0 {
		unused := slices.DeleteFunc(slices.Clone(idle), func(in state.Instance) bool { return in.LastRunID != "" })
		slices.SortFunc(unused, func(a, b state.Instance) int { return a.LaunchedAt.Compare(b.LaunchedAt) })
		unused = unused[:min(over, len(unused))]
		n, err := r.terminate(ctx, unused, func(state.Instance) string {
			return fmt.Sprintf("more idle warm instances than schedule %q wants (%d)", target.Schedule, target.Hot)
		})
		if err != nil {
			errorf("%v", err)
		}
		idle = idle[:len(idle)-n]
	}
	rep.Idle, rep.Stopped, rep.Warming = len(idle), len(stopped), len(warming)
	if r.d.Depth != nil {
		if depth, err := r.d.Depth(ctx, doc.Name); err == nil {
			rep.Depth = depth
		}
	}
	return rep
}

// unfit says why an idle, stopped or warming instance must go ("" when it may stay).
func (r *run) unfit(doc *poolconfig.Document, in state.Instance, gone map[string]string, now time.Time) string {
	switch {
	case gone[in.ID] != "":
		return "its instance is " + gone[in.ID] + " on EC2"
	case in.Signal == state.SignalFailed:
		return "its agent failed: " + lastLine(in.SignalLog)
	case in.Signal == state.SignalSpotInterrupted:
		return "spot interruption"
	case in.SpecHash != "" && in.SpecHash != doc.SpecHash && in.State != state.Created:
		return fmt.Sprintf("outdated spec %s (the pool's is %s)", in.SpecHash, doc.SpecHash)
	case in.State == state.Idle && !in.HeartbeatAt.IsZero() && now.Sub(in.HeartbeatAt) > r.cfg.HeartbeatStale:
		return fmt.Sprintf("no heartbeat since %s", in.HeartbeatAt.UTC().Format(time.RFC3339))
	}
	return ""
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "\n"); i >= 0 {
		return s[i+1:]
	}
	return s
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
		p := ec2.NewDescribeInstancesPaginator(r.d.EC2, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{Name: aws.String("instance-id"), Values: chunk}}})
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
func (r *run) promote(ctx context.Context, doc *poolconfig.Document, in state.Instance, now time.Time) *state.Instance {
	r.act(Action{Instance: in.ID, Pool: doc.Name, Do: "promote", Reason: "its agent is ready"})
	if r.cfg.DryRun {
		return &in
	}
	out, err := r.d.Store.Transition(ctx, state.Change{InstanceID: in.ID, Pool: doc.Name, From: state.Created, To: state.Idle,
		Version: in.Version, Threshold: now.Add(doc.Timeout(state.Idle)), Reason: "warm and ready"})
	if err != nil {
		if !errors.Is(err, state.ErrConflict) {
			r.fail("pool %s: promote %s: %v", doc.Name, in.ID, err)
		}
		return nil
	}
	r.offer(ctx, doc.Name, out)
	return out
}

func (r *run) offer(ctx context.Context, pool string, insts ...*state.Instance) {
	q, err := r.d.Queue(pool)
	if err == nil {
		err = q.Publish(ctx, insts...)
	}
	if err != nil {
		r.fail("pool %s: offer %d instances: %v (they stay idle without an offer until their deadline)", pool, len(insts), err)
	}
}

// stop stops idle instances for the stopped part of the warm pool: EC2 first (one request), then
// idle → stopped, and a new offer that says so.
func (r *run) stop(ctx context.Context, doc *poolconfig.Document, idle []state.Instance, now time.Time) []state.Instance {
	ids := make([]string, len(idle))
	for i, in := range idle {
		ids[i] = in.ID
		r.act(Action{Instance: in.ID, Pool: doc.Name, Do: "stop", Reason: "the schedule wants stopped warm instances"})
	}
	if r.cfg.DryRun {
		return idle
	}
	if _, err := r.d.EC2.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: ids}); err != nil {
		r.fail("pool %s: stop %d instances: %v", doc.Name, len(ids), err)
		return nil
	}
	var moved []state.Instance
	var offers []*state.Instance
	for _, in := range idle {
		out, err := r.d.Store.Transition(ctx, state.Change{InstanceID: in.ID, Pool: doc.Name, From: state.Idle, To: state.Stopped,
			Version: in.Version, Threshold: now.Add(doc.Timeout(state.Stopped)), Reason: "stopped warm instance"})
		if err != nil {
			// Claimed meanwhile: provision starts stopped instances it claims, but this one was
			// claimed as running. Start it again for its run.
			r.fail("pool %s: record %s stopped: %v", doc.Name, in.ID, err)
			continue
		}
		moved = append(moved, *out)
		offers = append(offers, out)
	}
	if len(offers) > 0 {
		r.offer(ctx, doc.Name, offers...)
	}
	return moved
}

// warming returns the pool's warm instances still being created (no run, within their deadline).
func (r *run) warming(ctx context.Context, doc *poolconfig.Document, now time.Time) ([]state.Instance, error) {
	items, err := r.d.Store.InPoolState(ctx, doc.Name, state.Created)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(items, func(in state.Instance) bool {
		return in.RunID != "" || !in.Threshold.After(now) || in.Signal == state.SignalReady
	}), nil
}

// leaseTTL bounds how long one refresh holds a pool's launch lease.
const leaseTTL = 2 * time.Minute

// leased takes the pool's launch lease; another refresh holding it fills the deficit this round.
func (r *run) leased(ctx context.Context, doc *poolconfig.Document) bool {
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

func (r *run) leaseName(doc *poolconfig.Document) string {
	return "launch/" + r.cfg.Stack + "/" + doc.Name
}

// unlease gives the pool's launch lease back once the launched instances are recorded.
func (r *run) unlease(ctx context.Context, doc *poolconfig.Document) {
	if r.cfg.DryRun {
		return
	}
	if err := r.d.Store.ReleaseLease(context.WithoutCancel(ctx), r.leaseName(doc), r.holder); err != nil {
		r.d.Log.Warn("release the launch lease; it runs out by itself", "pool", doc.Name, "error", err)
	}
}

// launch creates n warm instances (no run) in one request and records them.
func (r *run) launch(ctx context.Context, doc *poolconfig.Document, n int, now time.Time) (int, error) {
	r.act(Action{Pool: doc.Name, Do: "launch", Reason: fmt.Sprintf("%d warm instances missing", n)})
	if r.cfg.DryRun {
		return n, nil
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = now.Add(time.Minute)
	}
	launched, err := r.d.Launcher.Launch(ctx, fleet.Request{
		Pool: doc, Count: n, Deadline: deadline,
		Reserved: fleet.ForWarmPool(r.cfg.Stack, doc.Name),
		Token:    fmt.Sprintf("hangar-warm-%s-%d", doc.Name, now.Unix()/60),
		OnLaunch: func(ctx context.Context, launched []fleet.Instance) error {
			items := make([]*state.Instance, len(launched))
			ids := make([]string, len(launched))
			for i, l := range launched {
				ids[i] = l.ID
				items[i] = &state.Instance{ID: l.ID, Pool: doc.Name, Threshold: now.Add(doc.Timeout(state.Created)), LaunchedAt: now,
					Spec:        state.Spec{InstanceType: l.Type, UsageClass: l.UsageClass, AZ: l.AZ, VCPU: l.VCPU, MemoryMiB: l.MemoryMiB, SpecHash: doc.SpecHash},
					StateReason: "warm pool"}
			}
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := r.d.Store.Create(wctx, items); err != nil {
				return err
			}
			if err := fleet.MarkRecorded(wctx, r.d.EC2, ids); err != nil {
				r.d.Log.Warn("untag warm instances", "error", err)
			}
			return nil
		},
	})
	return len(launched), err
}
