package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/pool/pricing"
)

// Launched is what was launched, for whom.
type Launched struct {
	Pool      *pooldoc.Document
	Instances []fleet.Instance
	// At is when they were launched; their created deadline counts from it.
	At time.Time
	// Assign, when set, returns what each instance was created for (a run; or a label-routed job
	// each, with the runner made for it): nil for a warm pool. An instance whose
	// assignment comes back nil is recorded warm; one that comes back with an error is recorded
	// with what came back, and Record reports the error.
	Assign func(ctx context.Context, instanceID string) (*state.Assignment, error)
	// Reason is the items' state reason.
	Reason string
}

// recordTimeout bounds the writes of one Record, which outlive the caller's context;
// assignTimeout bounds the assignments' completion (making jobs' runners) within it.
const (
	recordTimeout = 30 * time.Second
	assignTimeout = 10 * time.Second
	// priceTimeout bounds the price lookups: an item is never held back long for its price.
	priceTimeout = 3 * time.Second
)

// Record writes the items of launched instances, in state created, in a context of its own (the
// items must be written even when the caller is being cancelled, or the instances would run
// without one), then makes their doorbells and removes their hangar:unrecorded tag. It returns the items written. A tag
// that cannot be removed is only logged: refresh removes it once it sees the item.
func (p *Pool) Record(ctx context.Context, l Launched) ([]*state.Instance, error) {
	if len(l.Instances) == 0 {
		return nil, nil
	}
	doc := l.Pool
	items := make([]*state.Instance, len(l.Instances))
	ids := make([]string, len(l.Instances))
	for i, in := range l.Instances {
		ids[i] = in.ID
		items[i] = &state.Instance{ID: in.ID, Pool: doc.Name, Threshold: l.At.Add(doc.Timeout(state.Created)), LaunchedAt: l.At,
			Spec: state.Spec{InstanceType: in.Type, UsageClass: in.UsageClass, AZ: in.AZ, VCPU: in.VCPU, MemoryMiB: in.MemoryMiB,
				SpecHash: doc.SpecHash},
			StateReason: l.Reason, Bell: p.Bells.URL(in.ID), Home: doc.Home()}
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	p.price(wctx, items)
	tokErr := p.assign(wctx, l, items)
	if err := p.Store.Create(wctx, items); err != nil {
		return nil, fmt.Errorf("record %d launched instances of pool %s: %w", len(items), doc.Name, err)
	}
	// Doorbells after items: a doorbell without a live item is an orphan refresh may delete. An
	// instance whose doorbell could not be made works without it (its agent polls its item).
	arns := make(map[string]string, len(ids))
	for _, id := range ids {
		arns[id] = doc.StateAccount().ARN(id)
	}
	if err := p.Bells.Create(wctx, arns); err != nil {
		p.log().Warn("launched instances recorded, but not all their doorbells made; their agents poll instead", "pool", doc.Name, "error", err)
	}
	if err := fleet.MarkRecorded(wctx, p.EC2, ids); err != nil {
		p.log().Warn("launched instances recorded, but their unrecorded tag stays; refresh removes it", "pool", doc.Name, "error", err)
	}
	return items, tokErr
}

// assign sets each item's assignment, in parallel. Items whose assignment cannot be completed
// are still recorded (an instance must never run without its item), with what came back; the
// error says so, and the caller gives them up or lets them serve as warm instances.
func (p *Pool) assign(ctx context.Context, l Launched, items []*state.Instance) error {
	if l.Assign == nil {
		return nil
	}
	// Assigning (making a job's runner) has a deadline of its own, well inside the record's:
	// the items must be written whatever GitHub does.
	ctx, cancel := context.WithTimeout(ctx, assignTimeout)
	defer cancel()
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Go(func() {
			var a *state.Assignment
			a, errs[i] = l.Assign(ctx, it.ID)
			if a != nil {
				it.Assignment = *a
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("assignments of launched instances of pool %s: %w", l.Pool.Name, err)
	}
	return nil
}

// price records each item's hourly price (left unknown when it cannot be had in priceTimeout).
func (p *Pool) price(ctx context.Context, items []*state.Instance) {
	if p.Prices == nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, priceTimeout)
	defer cancel()
	insts := make([]pricing.Instance, len(items))
	for i, in := range items {
		insts[i] = pricing.Instance{Type: in.InstanceType, AZ: in.AZ, UsageClass: in.UsageClass}
	}
	for i, p := range p.Prices.Prices(pctx, insts) {
		if p.Known() {
			items[i].Price, items[i].PriceSource = p.USD, p.Source
		}
	}
}

// Warm launches n warm instances of doc (no run, nothing to hand over) with one fleet request,
// recording them as they come, and returns how many were launched: fewer, with an error that
// errors.Is ErrAtCapacity, when the pool's or the stack's maxInstances leaves less room. Token
// makes the request idempotent; deadline bounds its retries after capacity errors.
func (p *Pool) Warm(ctx context.Context, doc *pooldoc.Document, n int, at time.Time, token string, deadline time.Time) (int, error) {
	capacity, release, err := p.reserve(ctx, doc, n, deadline, false)
	if err != nil {
		return 0, err
	}
	defer release()
	capErr := capacity.Err(n)
	if n = capacity.Allowed; n == 0 {
		return 0, capErr
	}
	launched, err := p.Launcher.Launch(ctx, fleet.Request{Pool: doc, Count: n, Deadline: capDeadline(doc, deadline),
		Reserved: fleet.ForWarmPool(p.Stack, doc.Name), Token: token,
		OnLaunch: func(ctx context.Context, launched []fleet.Instance) error {
			_, err := p.Record(ctx, Launched{Pool: doc, Instances: launched, At: at, Reason: "warm pool"})
			return err
		},
	})
	if err != nil {
		return len(launched), err
	}
	return len(launched), capErr
}
