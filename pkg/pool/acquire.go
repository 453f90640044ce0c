package pool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// MaxCount is the most instances one request may ask for.
const MaxCount = offers.MaxCount

// Kinds of secret an acquired instance is handed (Secret.Kind).
const (
	// KindRegistration is a runner registration token: a workflow run's, the same for each of
	// its instances.
	KindRegistration = doorbell.KindRegistration
	// KindJIT is a just-in-time runner configuration: one label-routed job's, for one instance.
	KindJIT = doorbell.KindJIT
)

// Secret is what one acquired instance is handed through its doorbell (never through the table):
// the only queue that instance's role may receive from and no other role may.
type Secret struct {
	Kind  string
	Value string
	// ExpiresAt is when the secret stops working (a registration token's hour); zero: unknown.
	ExpiresAt time.Time
}

// How says how an acquired instance came to the door.
type How int

// The ways an instance is acquired.
const (
	// Claimed: a warm instance, running, taken from the pool.
	Claimed How = iota
	// ClaimedStopped: a stopped warm instance, taken from the pool and started.
	ClaimedStopped
	// Created: launched for the request.
	Created
)

// Group is some of a request's instances, all for the same repository: Assign.Repo, whose reuse
// scope decides which warm instances fit (state.Reusable). A workflow run asks for one group; a
// batch of label-routed jobs, one per repository.
type Group struct {
	Count  int
	Assign state.Assignment
}

// Fit narrows which warm instances a request may claim, besides its pool's reuse scope.
type Fit struct {
	// UsageClass is spot, on-demand, or empty for either.
	UsageClass string
	// InstanceTypes are glob patterns over instance type names; none means any.
	InstanceTypes []string
	// MinVCPU and MinMemoryMiB are lower bounds; 0 means none.
	MinVCPU, MinMemoryMiB int
	// Exclude lists instances not to claim (ones that already failed the request).
	Exclude []string
	// Given are idle instances the door holds in hand, on no queue (just back in the pool):
	// claimed first, by the first group they fit; the door offers those not claimed.
	Given []*state.Instance
}

// Launch is how the instances a request does not claim are created.
type Launch struct {
	// Market is spot, on-demand or spot-fallback (the pool's when empty); Types are the instance
	// types to use (the pool's when empty), in preference order.
	Market string
	Types  []string
	// Tags are the caller's instance tags; the pool's reserved hangar:* tags are added last.
	Tags map[string]string
	// Run and Repository name the workflow run the instances are created for, in their reserved
	// tags; an empty Run creates them for label-routed jobs.
	Run, Repository string
	// Token makes the fleet requests idempotent (fleet.Request.Token).
	Token string
	// Deadline bounds the retries after capacity errors.
	Deadline time.Time
	// Reason is the created items' state reason.
	Reason string
	// NoWait has a creation under a cap that another creation is counting against not wait its
	// turn: its instances are Capped at once (a door whose requests can wait asks again when
	// that creation is done, Acquired.Room, rather than hold its caller meanwhile).
	NoWait bool
}

// ErrNoneLeft is what a Personalize hook returns when it has no assignment left to complete:
// the claim is not made, and it does not count as the hook failing.
var ErrNoneLeft = errors.New("no assignment left")

// Request is what a door asks of the pool: instances of one pool, each for an assignment.
type Request struct {
	// Doc is the pool's document as the door read it (its types resolved: Pool.Resolve).
	Doc    *pooldoc.Document
	Groups []Group
	Fit    Fit
	Launch Launch
	// ClaimDeadline is the threshold claimed instances get: by then their agents must have
	// acknowledged the claim.
	ClaimDeadline time.Time
	// Personalize, when set, completes a copy of its group's Assign for one instance just before
	// the instance is claimed or recorded (for label-routed jobs: the job it gets and the runner
	// made for it). A claim whose assignment cannot be completed is not made, and its group gets
	// no new instances: they would fail the same way. A created instance whose assignment cannot
	// be completed is recorded without one, a warm instance of the pool.
	Personalize func(ctx context.Context, instanceID string, a *state.Assignment) error
	// Unused, when set, is told of each assignment Personalize completed whose claim was lost
	// (the instance had moved on), so that what was made for it can be undone.
	Unused func(instanceID string, a state.Assignment)
	// Secret returns what to hand one acquired instance (as its item holds it: its assignment
	// and version); ok false hands nothing.
	Secret func(in *state.Instance) (s Secret, ok bool)
	// Held, when set, is told of each instance as soon as it is the door's, before its secret
	// is handed over: claimed, or created and recorded (with an assignment or, when Personalize
	// failed for it, without).
	Held func(in *state.Instance, how How)
}

// Acquired is what an Acquire did.
type Acquired struct {
	// Claimed are the instances claimed from the pool, as written; Stopped, the ids of those
	// that were stopped (Acquire starts them).
	Claimed []*state.Instance
	Stopped []string
	// Created are the instances launched and recorded for the request.
	Created []*state.Instance
	// Capped is how many instances were not created because the pool or the stack is at its
	// maxInstances, and CapErr says which cap (errors.Is ErrAtCapacity); nothing else failed
	// for them, and they may be asked for again once instances end or come back.
	Capped int
	CapErr error
	// Room is how many more instances the cap had room for when this creation counted, under
	// its lease, beyond those it created: the door may ask for that many more at once (0 when
	// uncapped, when nothing was counted, or when the launch failed).
	Room int
	// ClaimErr is why the pool could not be read or a claim failed (the rest was created);
	// StartErr, why the stopped instances could not be started; CreateErr, why instances could
	// not be launched or recorded.
	ClaimErr, StartErr, CreateErr error
	// ClaimTook and CreateTook are how long claiming and creating took.
	ClaimTook, CreateTook time.Duration
	// HandedAt is when the claimed instances' hand-overs began to go out (zero: none claimed).
	HandedAt time.Time

	background sync.WaitGroup
}

// Wait returns once the hand-overs to the claimed instances are sent (or given up) and the pool
// messages the claims received are tidied: the caller waits before it exits.
func (a *Acquired) Wait() { a.background.Wait() }

// Acquire gives a door the instances it asks for: claimed from the pool's warm instances first
// (none when the pool is drained), the stopped ones started, the rest launched with one EC2
// Fleet request and recorded the moment they exist; each instance is handed its secret through
// its doorbell as soon as it is the door's. It never fails as a whole: what it could not do is
// in the Acquired's errors, and what it did acquire is the caller's.
func (p *Pool) Acquire(ctx context.Context, req Request) (*Acquired, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	a := &acquiring{p: p, req: req, out: &Acquired{}, rest: make([]int, len(req.Groups))}
	for i, g := range req.Groups {
		a.rest[i] = g.Count
	}
	if !req.Doc.Drained { // a drained pool offers nothing: every instance is new
		a.claim(ctx)
	}
	a.create(ctx)
	return a.out, nil
}

func (r Request) validate() error {
	if r.Doc == nil {
		return errors.New("acquire: no pool document")
	}
	n := 0
	for _, g := range r.Groups {
		if g.Count < 0 {
			return fmt.Errorf("acquire from pool %s: a group of %d instances", r.Doc.Name, g.Count)
		}
		n += g.Count
	}
	if n < 1 || n > MaxCount {
		return fmt.Errorf("acquire from pool %s: %d instances: want 1 to %d", r.Doc.Name, n, MaxCount)
	}
	if r.Secret == nil {
		return fmt.Errorf("acquire from pool %s: no Secret hook: an instance must be handed what it serves with", r.Doc.Name)
	}
	for _, in := range r.Fit.Given {
		if in.Pool != r.Doc.Name {
			return fmt.Errorf("acquire from pool %s: instance %s given is of pool %q", r.Doc.Name, in.ID, in.Pool)
		}
		if _, err := offers.MessageFor(in); err != nil {
			return fmt.Errorf("acquire from pool %s: %w", r.Doc.Name, err)
		}
	}
	return nil
}

// acquiring is one Acquire in progress.
type acquiring struct {
	p   *Pool
	req Request
	out *Acquired
	// rest is how many instances each group still needs; failed marks the groups whose
	// Personalize failed during the claim (nothing more is created for them).
	rest   []int
	failed []atomic.Bool
}

// claim claims, group by group, what each needs of the pool's warm instances.
func (a *acquiring) claim(ctx context.Context) {
	start := time.Now()
	defer func() { a.out.ClaimTook = time.Since(start) }()
	doc := a.req.Doc
	queue, err := a.p.Queues.Queue(ctx, doc.Name)
	if err != nil {
		a.out.ClaimErr = fmt.Errorf("the queue of pool %s: %w", doc.Name, err)
		return
	}
	sel := &offers.Selector{Queue: queue, Store: a.p.Store, Log: a.p.Log}
	home := doc.Home()
	a.failed = make([]atomic.Bool, len(a.req.Groups))
	// An instance one group won is never another's to claim: a second offer of it (SQS delivers at
	// least once) would otherwise have a later group make an assignment for it, and lose.
	exclude := slices.Clone(a.req.Fit.Exclude)
	var given []offers.Message
	for _, in := range a.req.Fit.Given {
		m, _ := offers.MessageFor(in) // checked by validate
		given = append(given, m)
	}
	var errs []error
	for i, g := range a.req.Groups {
		if g.Count == 0 {
			continue
		}
		var personalize func(context.Context, string, *state.Assignment) error
		if a.req.Personalize != nil {
			personalize = func(ctx context.Context, id string, as *state.Assignment) error {
				err := a.req.Personalize(ctx, id, as)
				if err != nil && !errors.Is(err, ErrNoneLeft) {
					a.failed[i].Store(true)
				}
				return err
			}
		}
		res, tidy, err := sel.ClaimAsync(ctx, offers.Request{Count: g.Count, UsageClass: a.req.Fit.UsageClass,
			InstanceTypes: a.req.Fit.InstanceTypes, MinVCPU: a.req.Fit.MinVCPU, MinMemoryMiB: a.req.Fit.MinMemoryMiB,
			Exclude: exclude, Given: given, Assign: g.Assign, Personalize: personalize, Unused: a.req.Unused, Home: &home,
			Considered: a.p.Bells.Expect, Reuse: doc.Reuse, AliveSince: time.Now().Add(-state.HeartbeatFresh), ClaimDeadline: a.req.ClaimDeadline})
		// The pool's messages are tidied (the unneeded given back, the used deleted) while the
		// hand-overs go out; Wait waits for it.
		a.out.background.Go(tidy)
		if err != nil && !errors.Is(err, ErrNoneLeft) {
			errs = append(errs, err)
		}
		a.rest[i] -= len(res.Instances)
		for _, in := range res.Instances {
			exclude = append(exclude, in.ID)
		}
		a.claimed(ctx, res)
	}
	a.out.ClaimErr = errors.Join(errs...)
	if len(a.out.Stopped) > 0 {
		if err := a.p.StartStopped(ctx, a.out.Stopped); err != nil {
			a.out.StartErr = fmt.Errorf("start stopped instances %v: %w", a.out.Stopped, err)
		}
	}
}

// claimed takes one group's claims: the door hears of each, and their hand-overs go out at once,
// while the door goes on (each agent reads its item and registers as soon as its doorbell rings).
func (a *acquiring) claimed(ctx context.Context, res offers.Result) {
	if len(res.Instances) == 0 {
		return
	}
	stopped := map[string]bool{}
	for _, id := range res.Stopped {
		stopped[id] = true
	}
	a.out.Claimed = append(a.out.Claimed, res.Instances...)
	a.out.Stopped = append(a.out.Stopped, res.Stopped...)
	for _, in := range res.Instances {
		how := Claimed
		if stopped[in.ID] {
			how = ClaimedStopped
		}
		if a.req.Held != nil {
			a.req.Held(in, how)
		}
	}
	if a.out.HandedAt.IsZero() {
		a.out.HandedAt = time.Now()
	}
	insts := res.Instances
	a.out.background.Go(func() { a.p.HandOver(ctx, a.req.Doc, insts, a.req.Secret) })
}

// create launches the instances the claims left, for every group whose assignments can be made,
// with one fleet request (retried across types, zones and markets by the launcher), recording
// each the moment it exists and handing it its secret.
func (a *acquiring) create(ctx context.Context) {
	var slots []int // the group of each instance to create, in order
	for i, n := range a.rest {
		if a.failed != nil && a.failed[i].Load() {
			continue
		}
		for range max(n, 0) {
			slots = append(slots, i)
		}
	}
	if len(slots) == 0 {
		return
	}
	start := time.Now()
	defer func() { a.out.CreateTook = time.Since(start) }()
	doc, l := a.req.Doc, a.req.Launch
	capacity, release, err := a.p.reserve(ctx, doc, len(slots), l.Deadline, l.NoWait)
	if err != nil {
		a.out.CreateErr = err
		return
	}
	defer release() // once what was launched is recorded, for the next creation to count
	defer func() {
		// The room left is the count's, less what was launched; a launch that failed leaves none
		// to report (the next creation would fail the same way).
		if doc.Capped() && a.out.CreateErr == nil {
			a.out.Room = max(capacity.Left-len(a.out.Created), 0)
		}
	}()
	if capacity.Allowed < len(slots) {
		a.out.Capped, a.out.CapErr = len(slots)-capacity.Allowed, capacity.Err(len(slots))
		slots = slots[:capacity.Allowed]
		if len(slots) == 0 {
			return
		}
	}
	reserved := fleet.ForJobs(a.p.Stack, doc.Name)
	if l.Run != "" {
		reserved = fleet.ForRun(a.p.Stack, doc.Name, l.Run, l.Repository)
	}
	var (
		mu   sync.Mutex
		next int
	)
	assign := func(ctx context.Context, id string) (*state.Assignment, error) {
		mu.Lock()
		if next >= len(slots) {
			mu.Unlock()
			return nil, nil // more instances than asked for: warm instances of the pool
		}
		g := a.req.Groups[slots[next]]
		next++
		mu.Unlock()
		as := g.Assign
		if a.req.Personalize != nil {
			if err := a.req.Personalize(ctx, id, &as); err != nil {
				return nil, err
			}
		}
		return &as, nil
	}
	_, err = a.p.Launcher.Launch(ctx, fleet.Request{Pool: doc, Count: len(slots), Market: l.Market, Types: l.Types, Tags: l.Tags,
		Reserved: reserved, Deadline: capDeadline(doc, l.Deadline), Token: l.Token,
		OnLaunch: func(ctx context.Context, launched []fleet.Instance) error {
			items, err := a.p.Record(ctx, Launched{Pool: doc, Instances: launched, At: time.Now(), Assign: assign, Reason: l.Reason})
			a.out.Created = append(a.out.Created, items...)
			for _, in := range items {
				if a.req.Held != nil {
					a.req.Held(in, Created)
				}
			}
			// The doorbells exist now when this side makes them (Record): each secret waits there
			// for its agent, which takes it once it has booted. A workflow's step makes none: each
			// agent makes its own at boot, and the step hands over once the agent acknowledges
			// its assignment (provision's wait).
			if a.p.Bells.Manages {
				a.p.HandOver(ctx, doc, items, a.req.Secret)
			}
			if err != nil && items != nil {
				// Written, some without their assignment: those serve as warm instances, and the
				// launch goes on.
				a.p.log().Warn("created instances recorded, some without their assignment: they serve as warm instances",
					"pool", doc.Name, "error", err)
				err = nil
			}
			if err == nil {
				a.p.log().Info("created instances", "count", len(items), "pool", doc.Name)
			}
			return err
		},
	})
	a.out.CreateErr = err
}

// HandOver sends each instance of doc's pool that holds an assignment its secret (as secret gives
// it), through its doorbell, for the assignment its item holds (its run and version). The
// doorbell is the one the pool names, never the item's: whoever may write items could rewrite
// that, but not where a secret goes; and it is sent only if the doorbell is tagged with that
// instance's ARN (doorbell.Bells.HandOver). A hand-over that fails is only logged: the agent asks
// again for what it lacks (a run's), or fails the job's start and the job is placed again (a
// label-routed job's).
func (p *Pool) HandOver(ctx context.Context, doc *pooldoc.Document, insts []*state.Instance, secret func(*state.Instance) (Secret, bool)) {
	account := doc.StateAccount()
	ds := make([]doorbell.Delivery, 0, len(insts))
	for _, in := range insts {
		if in.RunID == "" {
			continue // recorded warm: nothing to hand over
		}
		s, ok := secret(in)
		if !ok {
			continue
		}
		ds = append(ds, doorbell.Delivery{URL: p.Bells.URL(in.ID), ARN: account.ARN(in.ID), HandOver: doorbell.HandOver{Run: in.RunID, Version: in.Version,
			Kind: s.Kind, Secret: s.Value, ExpiresAt: s.ExpiresAt}})
	}
	if err := p.Bells.HandOver(ctx, ds...); err != nil {
		p.log().Warn("hand the secrets over; an agent without its secret asks again or fails its job's start", "instances", len(ds), "error", err)
	}
}
