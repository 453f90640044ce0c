package provision

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hangar-ci/hangar/pkg/fleet"
	"github.com/hangar-ci/hangar/pkg/lifecycle"
	"github.com/hangar-ci/hangar/pkg/offers"
	"github.com/hangar-ci/hangar/pkg/poolconfig"
	"github.com/hangar-ci/hangar/pkg/state"
)

// acquire claims up to n instances from the pool and creates the rest.
func (p *provisioning) acquire(ctx context.Context, n int) error {
	claimed := p.claim(ctx, n)
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
	res, err := p.d.Claimer.Claim(ctx, offers.Request{Count: n, UsageClass: poolconfig.UsageClassOf(p.cfg.UsageClass), InstanceTypes: p.types,
		MinVCPU: p.cfg.MinVCPU, MinMemoryMiB: p.cfg.MinMemoryMiB, Assign: p.assign, Personalize: p.personalize, Reuse: doc.Reuse,
		AliveSince: time.Now().Add(-state.HeartbeatFresh), ClaimDeadline: time.Now().Add(doc.Timeout(state.Claimed)), Exclude: p.failedIDs()})
	// Ring first: each agent reads its item the moment its doorbell rings.
	bells := make([]string, len(res.Instances))
	for i, in := range res.Instances {
		bells[i] = in.Bell
	}
	if err := p.d.Bells.Ring(ctx, bells...); err != nil {
		p.d.Log.Warn("ring claimed instances; their agents notice on their next read", "error", err)
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
		if err := lifecycle.StartStopped(ctx, p.d.EC2, res.Stopped); err != nil {
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
			items, err := p.record.Record(ctx, lifecycle.Launch{Pool: doc, Instances: launched, At: time.Now(),
				Assign: p.assignFor, Reason: "created for run " + p.cfg.RunID})
			for _, in := range items {
				p.add(*in, false)
			}
			if err == nil {
				p.d.Log.Info("created instances", "count", len(items), "pool", doc.Name)
			}
			return err
		},
	})
	return err
}

// personalize gives one claim its registration token, sealed for that instance.
func (p *provisioning) personalize(ctx context.Context, id string, a *state.Assignment) error {
	tok, err := p.token(ctx, id)
	a.RegToken = tok
	return err
}

// assignFor is the run's assignment for one instance it created, with its sealed token; without a
// token the instance is still recorded for the run, and the error says why.
func (p *provisioning) assignFor(ctx context.Context, id string) (*state.Assignment, error) {
	a := p.assign
	err := p.personalize(ctx, id, &a)
	return &a, err
}

func (p *provisioning) failedIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.failed)
}
