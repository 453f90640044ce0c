package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
)

const (
	// capLeaseTTL bounds how long one creation holds its cap's lease: a CreateFleet with its
	// capacity retries and the recording of what it launched take well under it, and a holder
	// that died frees the cap after it.
	capLeaseTTL = 2 * time.Minute
	// capLeaseWait bounds how long a creation waits for a lease another creation holds, when its
	// own deadline is further off: creations under one cap take turns, each a CreateFleet long.
	capLeaseWait = 30 * time.Second
)

// ErrAtCapacity is returned (wrapped) when the pool, or the stack, has as many live instances as
// its maxInstances allows: nothing more is launched until some end.
var ErrAtCapacity = errors.New("at its maxInstances")

// Capacity is what a cap leaves for one creation.
type Capacity struct {
	// Allowed is how many instances may be created now (the count asked for, when uncapped).
	Allowed int
	// Limit and Live say which cap bound it, for the messages: the pool's or the stack's.
	Limit, Live int
	Of          string // "pool <name>" or "the stack"
}

// Err is ErrAtCapacity with the cap that bound it, when fewer than want may be created; nil
// otherwise.
func (c Capacity) Err(want int) error {
	if c.Allowed >= want {
		return nil
	}
	return fmt.Errorf("%s has %d live instances of its maxInstances %d, so %d of %d could not be created: %w",
		c.Of, c.Live, c.Limit, want-c.Allowed, want, ErrAtCapacity)
}

// reserve takes the lease of doc's cap (the stack's when it has one, which every pool's creations
// count against; else the pool's), counts the live instances under it, and returns how many of n
// instances may be created, with a release to call once what was created is recorded (so that
// the next creation counts it). An uncapped pool gets n and no lease.
func (p *Pool) reserve(ctx context.Context, doc *pooldoc.Document, n int, deadline time.Time) (Capacity, func(), error) {
	noop := func() {}
	if !doc.Capped() {
		return Capacity{Allowed: n}, noop, nil
	}
	name := "cap/" + p.Stack + "/" + doc.Name
	if doc.StackCap != nil {
		name = "cap/" + p.Stack
	}
	holder := randomHolder()
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
		if err := backoff.Sleep(wctx); err != nil {
			return Capacity{}, noop, fmt.Errorf("count pool %s against its cap: another launch held %s throughout: %w", doc.Name, name, err)
		}
	}
	release := func() {
		if err := p.Store.ReleaseLease(context.WithoutCancel(ctx), name, holder); err != nil {
			p.log().Warn("release the cap's lease; the next launch waits for it to run out", "lease", name, "error", err)
		}
	}
	c, err := p.headroom(ctx, doc, n)
	if err != nil || c.Allowed == 0 {
		release()
		return c, noop, err
	}
	return c, release, nil
}

// headroom counts the live instances under doc's caps and returns what they leave of n.
func (p *Pool) headroom(ctx context.Context, doc *pooldoc.Document, n int) (Capacity, error) {
	pools := []string{doc.Name}
	if doc.StackCap != nil {
		pools = doc.StackCap.Pools
	}
	live := make([]int, len(pools))
	errs := make([]error, len(pools))
	var wg sync.WaitGroup
	for i, name := range pools {
		wg.Go(func() {
			c, err := p.Store.Census(ctx, name)
			live[i], errs[i] = c.Live(), err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Capacity{}, fmt.Errorf("count the live instances under pool %s's cap: %w", doc.Name, err)
	}
	out := Capacity{Allowed: n}
	bound := func(limit, count int, of string) {
		if left := max(limit-count, 0); left < out.Allowed || out.Of == "" {
			out = Capacity{Allowed: min(left, out.Allowed), Limit: limit, Live: count, Of: of}
		}
	}
	if doc.MaxInstances > 0 {
		for i, name := range pools {
			if name == doc.Name {
				bound(doc.MaxInstances, live[i], "pool "+doc.Name)
			}
		}
	}
	if doc.StackCap != nil {
		total := 0
		for _, k := range live {
			total += k
		}
		bound(doc.StackCap.MaxInstances, total, "the stack")
	}
	return out, nil
}

func randomHolder() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
