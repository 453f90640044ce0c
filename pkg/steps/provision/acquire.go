package provision

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// acquire asks the pool for n instances for the run: claimed from its warm instances first, the
// rest created. A pool that cannot be read, or stopped instances that cannot be started, are
// warnings (creating makes up for the first; a stopped instance that never starts is replaced);
// instances that cannot be created fail the provision. Instances the pool's or the stack's
// maxInstances leaves no room for fail it at once, or, with wait-for-capacity, are asked for
// again as room appears (instances given back are claimed; ended ones make room to create).
func (p *provisioning) acquire(ctx context.Context, n int) error {
	backoff := wait.Backoff{Initial: capacityRetryInitial, Max: capacityRetryMax}
	for round := 0; ; round++ {
		acq, err := p.acquireOnce(ctx, n, round)
		if err != nil || acq.CapErr == nil {
			return err
		}
		if !p.cfg.WaitForCapacity {
			return fmt.Errorf("%w (set wait-for-capacity: true to wait for room, raise maxInstances, or release runs)", acq.CapErr)
		}
		if round == 0 {
			p.warn("waiting for room: %v", acq.CapErr)
		}
		n = acq.Capped
		if err := backoff.Sleep(ctx); err != nil {
			return fmt.Errorf("no room under the cap before the registration timeout: %w", acq.CapErr)
		}
	}
}

// How often a provision waiting for capacity asks again: soon at first (a run's instances come
// back within seconds of its release), then no more than every 15 s per waiting provision.
const (
	capacityRetryInitial = time.Second
	capacityRetryMax     = 15 * time.Second
)

// acquireOnce is one Acquire of n instances; round tells the creations apart for idempotency.
func (p *provisioning) acquireOnce(ctx context.Context, n, round int) (*pool.Acquired, error) {
	doc := p.d.Doc
	deadline, _ := ctx.Deadline()
	acq, err := p.d.Pool.Acquire(ctx, pool.Request{
		Doc:    doc,
		Groups: []pool.Group{{Count: n, Assign: p.assign}},
		Fit: pool.Fit{UsageClass: pooldoc.UsageClassOf(p.cfg.UsageClass), InstanceTypes: p.types, MinVCPU: p.cfg.MinVCPU,
			MinMemoryMiB: p.cfg.MinMemoryMiB, Exclude: p.failedIDs()},
		Launch: pool.Launch{Market: p.cfg.UsageClass, Types: p.types, Tags: p.cfg.Tags, Run: p.cfg.RunID, Repository: p.cfg.Repository,
			Token:    fmt.Sprintf("hangar-%s-%d-%s-%d-%d", p.cfg.RunID, p.cfg.RunAttempt, doc.Name, p.replaced, round),
			Deadline: deadline, Reason: "created for run " + p.cfg.RunID},
		ClaimDeadline: time.Now().Add(doc.Timeout(state.Claimed)),
		Secret:        p.secret,
		Held:          p.held,
	})
	if err != nil {
		return nil, err
	}
	// The hand-overs of the claims go out while the wait reads; the step waits for them (and the
	// tidying of the pool's messages) before it ends.
	p.handing.Go(acq.Wait)
	p.res.Timing.Claim += acq.ClaimTook
	p.res.Timing.Create += acq.CreateTook
	if !acq.HandedAt.IsZero() {
		p.handedAt = acq.HandedAt
	}
	if acq.ClaimErr != nil {
		p.warn("claim from pool %s: %v (creating instead)", doc.Name, acq.ClaimErr)
	}
	if acq.StartErr != nil {
		p.warn("%v", acq.StartErr)
	}
	return acq, acq.CreateErr
}

// held makes an instance acquired for the run a member the wait waits on. A claimed agent must
// acknowledge its claim within a bound (longer for one that was stopped, which boots first).
func (p *provisioning) held(in *state.Instance, how pool.How) {
	p.add(*in, how != pool.Created)
	switch how {
	case pool.Claimed:
		p.expectAck(in.ID, state.AckTimeout)
	case pool.ClaimedStopped:
		p.expectAck(in.ID, state.StartAckTimeout)
	}
}

// secret is what each instance of the run is handed: the run's registration token.
func (p *provisioning) secret(in *state.Instance) (pool.Secret, bool) {
	if in.RunID != p.cfg.RunID {
		return pool.Secret{}, false
	}
	return pool.Secret{Kind: pool.KindRegistration, Value: p.token.Value, ExpiresAt: p.token.ExpiresAt}, true
}

func (p *provisioning) failedIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.failed)
}
