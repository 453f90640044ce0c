package provision

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// acquire claims up to n instances from the pool and creates the rest.
func (p *provisioning) acquire(ctx context.Context, n int) error {
	claimed := 0
	if !p.d.Pool.Drained { // a drained pool offers nothing: every run gets new instances
		claimed = p.claim(ctx, n)
	}
	if rest := n - claimed; rest > 0 {
		return p.create(ctx, rest)
	}
	return nil
}

// claim takes up to n idle (or stopped) instances from the pool, starts the stopped ones, and
// returns how many it took. A pool that cannot be read is a warning: create makes up for it.
func (p *provisioning) claim(ctx context.Context, n int) int {
	doc := p.d.Pool
	start := time.Now()
	defer func() { p.res.Timing.Claim += time.Since(start) }()
	home := doc.Home()
	res, tidy, err := p.d.Claimer.ClaimAsync(ctx, offers.Request{Count: n, UsageClass: pooldoc.UsageClassOf(p.cfg.UsageClass), InstanceTypes: p.types,
		MinVCPU: p.cfg.MinVCPU, MinMemoryMiB: p.cfg.MinMemoryMiB, Assign: p.assign, Home: &home, Reuse: doc.Reuse,
		AliveSince: time.Now().Add(-state.HeartbeatFresh), ClaimDeadline: time.Now().Add(doc.Timeout(state.Claimed)), Exclude: p.failedIDs()})
	// The pool's messages are tidied (the unneeded given back, the used deleted) while the
	// hand-overs go out; the step waits for it before it ends.
	p.handing.Go(tidy)
	// Hand over at once, while the wait reads: the token rings each doorbell, each agent reads
	// its item and registers, and the wait's first read comes when they are expected to be done.
	if len(res.Instances) > 0 {
		claimed := res.Instances
		p.handedAt = time.Now()
		p.handing.Go(func() {
			p.handOver(ctx, claimed...)
		})
	}
	for _, in := range res.Instances {
		ack := state.AckTimeout
		if slices.Contains(res.Stopped, in.ID) {
			ack = state.StartAckTimeout
		}
		p.add(*in, true)
		p.expectAck(in.ID, ack)
	}
	if err != nil {
		p.warn("claim from pool %s: %v (creating instead)", doc.Name, err)
	}
	if len(res.Stopped) > 0 {
		if err := pool.StartStopped(ctx, p.d.EC2, res.Stopped); err != nil {
			p.warn("start stopped instances %v: %v", res.Stopped, err)
		}
	}
	return len(res.Instances)
}

// create launches n instances for the run with one fleet request (retried across types, zones
// and markets by the launcher), recording each the moment it exists.
func (p *provisioning) create(ctx context.Context, n int) error {
	doc := p.d.Pool
	start := time.Now()
	defer func() { p.res.Timing.Create += time.Since(start) }()
	deadline, _ := ctx.Deadline()
	_, err := p.d.Launcher.Launch(ctx, fleet.Request{
		Pool: doc, Count: n, Market: p.cfg.UsageClass, Types: p.types, Tags: p.cfg.Tags,
		Reserved: fleet.ForRun(p.cfg.Stack, doc.Name, p.cfg.RunID, p.cfg.Repository),
		Deadline: deadline,
		Token:    fmt.Sprintf("hangar-%s-%d-%s-%d", p.cfg.RunID, p.cfg.RunAttempt, doc.Name, p.replaced),
		OnLaunch: func(ctx context.Context, launched []fleet.Instance) error {
			items, err := p.record.Record(ctx, pool.Launch{Pool: doc, Instances: launched, At: time.Now(),
				Assign: p.assignFor, Reason: "created for run " + p.cfg.RunID})
			for _, in := range items {
				p.add(*in, false)
			}
			// The doorbells exist now (Record makes them): the token waits there for the agents,
			// which ask for it again should it expire before they boot.
			p.handOver(ctx, items...)
			if err == nil {
				p.d.Log.Info("created instances", "count", len(items), "pool", doc.Name)
			}
			return err
		},
	})
	return err
}

// assignFor is the run's assignment for one instance it created (its token follows through the
// doorbell).
func (p *provisioning) assignFor(context.Context, string) (*state.Assignment, error) {
	a := p.assign
	return &a, nil
}

// handOver sends the run's registration token to the doorbell of each instance, for the
// assignment the item holds (its run and version). A hand-over that fails is only logged: the
// agent asks for the token it lacks, and the wait answers (answerAsks).
func (p *provisioning) handOver(ctx context.Context, items ...*state.Instance) {
	ds := make([]doorbell.Delivery, 0, len(items))
	for _, in := range items {
		if in.RunID != p.cfg.RunID {
			continue
		}
		// The doorbell provision names itself, never the item's bell: whoever may write items
		// could rewrite that, but not where the token goes.
		ds = append(ds, doorbell.Delivery{URL: p.d.Bells.URL(in.ID), HandOver: doorbell.HandOver{Run: in.RunID, Version: in.Version,
			Kind: doorbell.KindRegistration, Secret: p.token.Value, ExpiresAt: p.token.ExpiresAt}})
	}
	if err := p.d.Bells.HandOver(ctx, ds...); err != nil {
		p.d.Log.Warn("hand the registration token over; the agents ask again for what they lack", "error", err)
	}
}

func (p *provisioning) failedIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.failed)
}
