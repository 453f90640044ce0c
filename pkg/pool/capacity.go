package pool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

const (
	// capLeaseTTL bounds how long one creation holds its cap's lease, and a holder that died
	// frees the cap after it. A creation under a cap retries capacity errors for capLaunchFor at
	// most (capDeadline), so that it has recorded what it launched well before its lease runs out.
	capLeaseTTL  = 2 * time.Minute
	capLaunchFor = 90 * time.Second
	// capLeaseWait bounds how long a creation waits for a lease another creation holds, when its
	// own deadline is further off: creations under one cap take turns, each a CreateFleet long.
	capLeaseWait = 30 * time.Second
)

// ErrAtCapacity is returned (wrapped) when the pool, or the stack, has as many live instances as
// its maxInstances allows: nothing more is launched until some end.
var ErrAtCapacity = errors.New("at its maxInstances")

// ErrImageBroken is matched by a creation refused because instances of the pool's launch spec
// failed the image contract: every other would fail the same way.
var ErrImageBroken = errors.New("its image lacks what Hangar needs")

// Capacity is what a cap leaves for one creation.
type Capacity struct {
	// Allowed is how many instances may be created now (the count asked for, when uncapped);
	// Left, how many the cap has room for in all.
	Allowed, Left int
	// Limit and Live say which cap bound it, for the messages: the pool's or the stack's.
	Limit, Live int
	Of          string // "pool <name>" or "the stack"
	// Busy says another creation was counting against the cap, and this one did not wait its
	// turn (Launch.NoWait): nothing is known of the room, and Allowed is 0.
	Busy bool
}

// Err is ErrAtCapacity with the cap that bound it, when fewer than want may be created; nil
// otherwise.
func (c Capacity) Err(want int) error {
	if c.Allowed >= want {
		return nil
	}
	if c.Busy {
		return fmt.Errorf("another launch is counting against %s's maxInstances, so %d instances wait for it: %w", c.Of, want, ErrAtCapacity)
	}
	return fmt.Errorf("%s has %d live instances of its maxInstances %d, so %d of %d could not be created: %w",
		c.Of, c.Live, c.Limit, want-c.Allowed, want, ErrAtCapacity)
}

// launchable refuses a creation of a spec whose instances failed the image contract
// (MarkBroken): the image is fixed by a deploy, whose new spec launches again. A mark that cannot
// be read does not stop a creation.
func (p *Pool) launchable(ctx context.Context, doc *pooldoc.Document) error {
	b, err := p.Store.Broken(ctx, doc.Name)
	switch {
	case err != nil:
		p.log().Warn("read whether the pool's image is broken; creating anyway", "pool", doc.Name, "error", err)
	case b != nil && b.Spec == doc.SpecHash:
		return fmt.Errorf("pool %s: %w, as its instances of spec %s reported at %s (%s): fix the image and deploy; its new spec launches again",
			doc.Name, ErrImageBroken, b.Spec, b.At.UTC().Format(time.RFC3339), b.Reason)
	}
	return nil
}

// reserve takes the lease of doc's cap (the stack's when it has one, which every pool's creations
// count against; else the pool's), counts the live instances under it, and returns how many of n
// instances may be created, with a release to call once what was created is recorded (so that
// the next creation counts it). An uncapped pool gets n and no lease. When another creation holds
// the lease, reserve waits its turn until deadline (capLeaseWait at most), or, with noWait, says
// the cap is busy at once.
func (p *Pool) reserve(ctx context.Context, doc *pooldoc.Document, n int, deadline time.Time, noWait bool) (Capacity, func(), error) {
	noop := func() {}
	if err := p.launchable(ctx, doc); err != nil {
		return Capacity{}, noop, err
	}
	if !doc.Capped() {
		return Capacity{Allowed: n}, noop, nil
	}
	// A cap the table alone shows full says so without its lease, which creations under one
	// cap take in turns, and without asking EC2: a count made meanwhile can only miss room (a
	// creation adds, never frees), never give more than there is, so a job waiting under a full
	// cap costs one query and does not queue for the lease.
	if c, err := p.headroom(ctx, doc, n, false); err != nil || c.Allowed == 0 {
		return c, noop, err
	}
	name, of := "cap/"+p.Stack+"/"+doc.Name, "pool "+doc.Name
	if doc.StackCap != nil {
		name, of = "cap/"+p.Stack, "the stack"
	}
	holder := state.NewLeaseHolder()
	waitUntil := time.Now().Add(capLeaseWait)
	if !deadline.IsZero() && deadline.Before(waitUntil) {
		waitUntil = deadline
	}
	wctx, cancel := context.WithDeadline(ctx, waitUntil)
	defer cancel()
	backoff := wait.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond}
	for {
		ok, err := p.Store.Lease(ctx, name, holder, capLeaseTTL)
		if err != nil {
			return Capacity{}, noop, fmt.Errorf("count pool %s against its cap: %w", doc.Name, err)
		}
		if ok {
			break
		}
		if noWait {
			return Capacity{Of: of, Busy: true}, noop, nil
		}
		if err := backoff.Sleep(wctx); err != nil {
			return Capacity{}, noop, fmt.Errorf("count pool %s against its cap: another launch held %s throughout: %w", doc.Name, name, err)
		}
	}
	release := func() {
		if err := p.Store.ReleaseLease(context.WithoutCancel(ctx), name, holder); err != nil {
			p.log().Warn("release the cap's lease; the next launch waits for it to run out", "lease", name, "error", err)
		}
	}
	c, err := p.headroom(ctx, doc, n, true)
	if err != nil || c.Allowed == 0 {
		release()
		return c, noop, err
	}
	return c, release, nil
}

// headroom counts the live instances under doc's caps and returns what they leave of n. An
// instance is live if the table or (withEC2) EC2 says so: the table's index and EC2's
// descriptions each lag a write by a moment, and an item moving between states can escape one
// census, so a launch just recorded, or an instance just claimed, is counted by the other.
func (p *Pool) headroom(ctx context.Context, doc *pooldoc.Document, n int, withEC2 bool) (Capacity, error) {
	pools := []string{doc.Name}
	if doc.StackCap != nil {
		pools = doc.StackCap.Pools
	}
	live := make([]map[string]bool, len(pools))
	errs := make([]error, len(pools)+1)
	var ec2Live map[string]map[string]bool
	var wg sync.WaitGroup
	for i, name := range pools {
		wg.Go(func() {
			c, err := p.Store.Census(ctx, name)
			live[i], errs[i] = map[string]bool{}, err
			for _, id := range c.IDs {
				live[i][id] = true
			}
		})
	}
	if withEC2 && p.EC2 != nil {
		wg.Go(func() { ec2Live, errs[len(pools)] = p.describeLive(ctx, pools) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Capacity{}, fmt.Errorf("count the live instances under pool %s's cap: %w", doc.Name, err)
	}
	count := make([]int, len(pools))
	for i, name := range pools {
		for id := range ec2Live[name] {
			live[i][id] = true
		}
		count[i] = len(live[i])
	}
	out := Capacity{Allowed: n}
	bound := func(limit, count int, of string) {
		if left := max(limit-count, 0); left < out.Left || out.Of == "" {
			out = Capacity{Allowed: min(left, n), Left: left, Limit: limit, Live: count, Of: of}
		}
	}
	if i := slices.Index(pools, doc.Name); doc.MaxInstances > 0 && i >= 0 {
		bound(doc.MaxInstances, count[i], "pool "+doc.Name)
	}
	if doc.StackCap != nil {
		total := 0
		for _, k := range count {
			total += k
		}
		bound(doc.StackCap.MaxInstances, total, "the stack")
	}
	return out, nil
}

// describeLive returns, by pool, the ids of the stack's instances EC2 has not terminated (pending,
// running, stopping or stopped) in pools.
func (p *Pool) describeLive(ctx context.Context, pools []string) (map[string]map[string]bool, error) {
	out := map[string]map[string]bool{}
	pages := ec2.NewDescribeInstancesPaginator(p.EC2, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:" + fleet.TagStack), Values: []string{p.Stack}},
		{Name: aws.String("tag:" + fleet.TagPool), Values: pools},
		{Name: aws.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped"}},
	}})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("describe the stack's live instances: %w", err)
		}
		for _, r := range page.Reservations {
			for _, in := range r.Instances {
				for _, t := range in.Tags {
					if aws.ToString(t.Key) != fleet.TagPool {
						continue
					}
					pool := aws.ToString(t.Value)
					if out[pool] == nil {
						out[pool] = map[string]bool{}
					}
					out[pool][aws.ToString(in.InstanceId)] = true
				}
			}
		}
	}
	return out, nil
}

// capDeadline is the deadline of a launch's capacity retries under doc's cap: deadline, but no
// later than capLaunchFor from now (the launch holds the cap's lease throughout).
func capDeadline(doc *pooldoc.Document, deadline time.Time) time.Time {
	if !doc.Capped() {
		return deadline
	}
	bound := time.Now().Add(capLaunchFor)
	if deadline.IsZero() || deadline.After(bound) {
		return bound
	}
	return deadline
}
