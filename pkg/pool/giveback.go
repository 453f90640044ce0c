package pool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
)

// Runners is what the pool does on GitHub in one scope (ghclient.Client): list the scope's runners
// and delete one. It mints nothing.
type Runners interface {
	Runners(ctx context.Context) ([]ghapi.Runner, error)
	DeleteRunner(ctx context.Context, id int64) error
}

// GiveBack is a run's instances on their way back to the pool.
type GiveBack struct {
	// Run is the run giving them back.
	Run string
	// Instances are the run's instances as last read: those serving the run go back to their
	// pools once their agents deregister, those still booting for it are terminated, the others
	// are left alone.
	Instances []state.Instance
	// GitHub deletes the run's runners from where they are registered; Names are the stack's
	// runner names, by which alone a runner is known as Hangar's.
	GitHub Runners
	Names  state.RunnerNames
	// AllRunners deletes every runner the stack registered for the run, whether or not its
	// instance is among Instances (a release of the whole run); otherwise only those of
	// Instances (another provision of the same run keeps its own).
	AllRunners bool
	// DeregisterTimeout is how long agents have to deregister before their instances are
	// terminated instead of offered (DefaultDeregisterTimeout when 0); PollInterval caps the wait
	// between reads of the items (DefaultPollInterval when 0).
	DeregisterTimeout, PollInterval time.Duration
}

// Defaults of a GiveBack.
const (
	DefaultDeregisterTimeout = 2 * time.Minute
	DefaultPollInterval      = 200 * time.Millisecond
)

// GiveBack gives a run's instances back (GiveBack.Instances), then deletes the run's runners
// from GitHub: no instance holds a token that could remove its runner, so this is how they go.
func (p *Pool) GiveBack(ctx context.Context, gb GiveBack) *GivenBack {
	if gb.DeregisterTimeout == 0 {
		gb.DeregisterTimeout = DefaultDeregisterTimeout
	}
	if gb.PollInterval == 0 {
		gb.PollInterval = DefaultPollInterval
	}
	g := &giving{p: p, gb: gb, run: gb.Run, start: time.Now(), res: &GivenBack{}, held: map[string]state.Instance{}}
	mine := make(map[string]bool, len(gb.Instances))
	for _, in := range gb.Instances {
		mine[in.ID] = true
	}
	return g.giveBack(ctx, gb.Instances, func(id string) bool { return gb.AllRunners || mine[id] })
}

// Outcome is what happened to one instance.
type Outcome struct {
	ID, Pool, Type, AZ, UsageClass string
	// Result: returned, terminated, already released.
	Result string
	// Reason says why, for terminated instances.
	Reason  string
	Seconds float64 // from the start of the release to the outcome
	// HeldSeconds is how long the run held the instance (its assignment to the outcome), and
	// Cost that × the instance's hourly price as launched; PriceKnown is false when the price is
	// unknown (Cost is then 0, not a guess).
	HeldSeconds float64
	Cost        float64
	PriceKnown  bool
}

// GivenBack is what a GiveBack did.
type GivenBack struct {
	Instances []Outcome
	// RunnersDeleted counts the run's runners deleted from GitHub.
	RunnersDeleted int
	Warnings       []string
	Took           time.Duration
}

// Outcomes.
const (
	Returned   = "returned"
	Terminated = "terminated"
	Already    = "already released"
)

// giveBack gives insts back, then deletes the runners of the run on the instances ours accepts.
func (g *giving) giveBack(ctx context.Context, insts []state.Instance, ours func(instanceID string) bool) *GivenBack {
	g.giveBackAll(ctx, insts)
	g.cleanGitHub(ctx, ours)
	slices.SortFunc(g.res.Instances, func(a, b Outcome) int { return strings.Compare(a.ID, b.ID) })
	g.res.Took = time.Since(g.start)
	return g.res
}

// giving is one GiveBack in progress.
type giving struct {
	p     *Pool
	gb    GiveBack
	run   string
	start time.Time
	mu    sync.Mutex
	res   *GivenBack
	// held are the run's instances as first read, for what the run held them and their price.
	held map[string]state.Instance
}

func (g *giving) warn(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	g.p.log().Warn(msg, "run", g.run)
	g.mu.Lock()
	g.res.Warnings = append(g.res.Warnings, msg)
	g.mu.Unlock()
}

func (g *giving) outcome(in state.Instance, result, reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	o := Outcome{ID: in.ID, Pool: in.Pool, Type: in.InstanceType, AZ: in.AZ,
		UsageClass: in.UsageClass, Result: result, Reason: reason, Seconds: time.Since(g.start).Seconds()}
	if h, ok := g.held[in.ID]; ok && !h.AssignedAt.IsZero() {
		o.HeldSeconds = time.Since(h.AssignedAt).Seconds()
		if o.PriceKnown = h.PriceSource != ""; o.PriceKnown {
			o.Cost = o.HeldSeconds * h.Price / 3600
		}
	}
	g.res.Instances = append(g.res.Instances, o)
}

// terminate retires instances; those someone else moved first are theirs, not terminated.
func (g *giving) terminate(ctx context.Context, reason string, insts ...state.Instance) {
	if len(insts) == 0 {
		return
	}
	g.retired(reason, g.p.Retire(ctx, insts, Because(reason)))
}

// releasing is one instance on its way back.
type releasing struct {
	inst    state.Instance
	version int64 // the version release wrote
	done    bool
}

// giveBackAll sorts the run's instances by where they stand and gives each back its way.
func (g *giving) giveBackAll(ctx context.Context, insts []state.Instance) {
	var back, unacked, booting []state.Instance
	for _, in := range insts {
		if in.RunID == g.run {
			g.held[in.ID] = in
		}
		switch {
		case in.RunID != g.run:
			g.outcome(in, Already, "")
		case in.State == state.Claimed && in.AckVersion < in.Version:
			unacked = append(unacked, in)
		case in.State == state.Running || in.State == state.Claimed:
			back = append(back, in)
		case in.State == state.Created:
			booting = append(booting, in)
		default:
			g.outcome(in, Already, "")
		}
	}
	g.terminate(ctx, "still booting for the run", booting...)
	back = append(back, g.giveBackUnacknowledged(ctx, unacked)...)
	if len(back) == 0 {
		return
	}
	g.awaitDeregistered(ctx, g.toIdle(ctx, back))
}

// giveBackUnacknowledged gives back claims whose agents have not acknowledged them (a provision
// killed before it rang them, or one given up before they noticed): the write is conditional on
// that (state.Change.Unacknowledged), and the agents then never serve the run, so the instances
// are offered at once, with nothing to deregister. It returns those whose agents acknowledged
// meanwhile, for the usual way back.
func (g *giving) giveBackUnacknowledged(ctx context.Context, insts []state.Instance) []state.Instance {
	var (
		acked []state.Instance
		ready []*state.Instance
	)
	for try := 0; len(insts) > 0 && try < 2; try++ {
		backs := g.backs(ctx, insts, true, "released by run "+g.run+" before its agent took the claim")
		insts = nil
		for i, w := range g.p.ToIdleAll(ctx, backs) {
			in := backs[i].Instance
			if w.Err == nil {
				ready = append(ready, w.Item)
				continue
			}
			var conflict *state.ConflictError
			cur := (*state.Instance)(nil)
			if errors.As(w.Err, &conflict) {
				cur = conflict.Current
			}
			switch {
			case cur != nil && cur.RunID == g.run && cur.Version == in.Version && cur.Retire != in.Retire && try == 0:
				insts = append(insts, *cur) // marked to retire meanwhile (a drain): again, as it is now
			case cur != nil && cur.RunID == g.run && (cur.State == state.Claimed || cur.State == state.Running):
				acked = append(acked, *cur) // noticed meanwhile
			default:
				if conflict == nil {
					g.warn("release %s: %v", in.ID, w.Err)
				}
				g.outcome(in, Already, w.Err.Error())
			}
		}
	}
	g.offer(ctx, ready)
	return acked
}

// backs is how insts go back to idle: each with the idle deadline its item says (state.Home).
// An instance whose item does not say where it goes back is terminated instead (NotReusable).
func (g *giving) backs(ctx context.Context, insts []state.Instance, unacknowledged bool, reason string) []Back {
	backs := make([]Back, 0, len(insts))
	for _, in := range insts {
		if !in.Known() {
			g.terminate(ctx, NotReusable(&in, nil), in)
			continue
		}
		backs = append(backs, Back{Instance: in, Idle: in.IdleTimeout(), RunID: g.run, Unacknowledged: unacknowledged, Reason: reason})
	}
	return backs
}

// toIdle moves instances to idle, all in one request, following each through a concurrent
// claimed → running (up to three writes each); it returns those written, to wait for. The items
// carry no token for the agents: each agent stops its runner and forgets the registration, and
// release deletes the runners through the API (cleanGitHub).
func (g *giving) toIdle(ctx context.Context, insts []state.Instance) []*releasing {
	var waiting []*releasing
	for try := 0; len(insts) > 0; try++ {
		if try == 3 {
			for _, in := range insts {
				g.warn("release %s: the item kept changing; leaving it to its deadline", in.ID)
			}
			break
		}
		backs := g.backs(ctx, insts, false, "released by run "+g.run)
		insts = nil
		for i, w := range g.p.ToIdleAll(ctx, backs) {
			in := backs[i].Instance
			if w.Err == nil {
				waiting = append(waiting, &releasing{inst: in, version: w.Item.Version})
				continue
			}
			var conflict *state.ConflictError
			if !errors.As(w.Err, &conflict) || conflict.Current == nil {
				g.warn("release %s: %v", in.ID, w.Err)
				g.outcome(in, Already, w.Err.Error())
				continue
			}
			cur := *conflict.Current
			if cur.RunID != g.run || (cur.State != state.Running && cur.State != state.Claimed) {
				g.outcome(cur, Already, "")
				continue
			}
			insts = append(insts, cur) // it moved within the run (claimed → running): again from where it is
		}
	}
	return waiting
}

// awaitDeregistered waits for each agent's DEREGISTERED, offering each instance to its pool as
// soon as it arrives; what has not arrived by the deadline is terminated.
func (g *giving) awaitDeregistered(ctx context.Context, waiting []*releasing) {
	if len(waiting) == 0 {
		return
	}
	ids := make([]string, len(waiting))
	for i, w := range waiting {
		ids[i] = w.inst.ID
	}
	wctx, cancel := context.WithTimeout(ctx, g.gb.DeregisterTimeout)
	defer cancel()
	err := wait.Sleep(wctx, g.firstRead(waiting))
	if err == nil {
		err = g.p.Store.Poll(wctx, ids, g.gb.PollInterval, func(items map[string]*state.Instance) (bool, time.Duration) {
			var ready []*state.Instance
			left := 0
			for _, w := range waiting {
				if !w.done {
					ready, left = g.settle(ctx, w, items[w.inst.ID], ready, left)
				}
			}
			g.offer(ctx, ready)
			return left == 0, 0
		})
	}
	if err == nil {
		return
	}
	var stuck []state.Instance
	for _, w := range waiting {
		if !w.done {
			in := w.inst
			in.Version, in.State, in.RunID = w.version, state.Idle, ""
			stuck = append(stuck, in)
		}
	}
	g.terminate(ctx, fmt.Sprintf("its agent did not deregister within %s", g.gb.DeregisterTimeout), stuck...)
}

// firstRead is how long to wait after the ring before reading the items at all: until about when
// their agents are expected to have deregistered (state.Deregistration), and at most half the
// deregister timeout.
func (g *giving) firstRead(waiting []*releasing) time.Duration {
	insts := make([]state.Instance, len(waiting))
	for i, w := range waiting {
		insts[i] = w.inst
	}
	d, _ := state.Deregistration.First(insts, 0, g.gb.PollInterval)
	return min(d, g.gb.DeregisterTimeout/2)
}

// settle looks at one released instance's item (nil when unreadable or gone): deregistered
// instances join ready; left counts those still to wait for.
func (g *giving) settle(ctx context.Context, w *releasing, it *state.Instance, ready []*state.Instance, left int) ([]*state.Instance, int) {
	switch {
	case it == nil || it.State == state.Terminated:
		w.done = true
		g.outcome(w.inst, Terminated, "terminated meanwhile")
	case it.SignalFor(state.SignalDeregistered, g.run, w.version) && it.State == state.Idle && it.Version == w.version:
		// The agent has stopped its runner and forgotten the registration; cleanGitHub deletes
		// the runner from GitHub.
		w.done = true
		ready = append(ready, it)
	case it.Version != w.version:
		w.done = true // someone else moved it on (refresh): not ours to offer
		g.outcome(*it, Already, "")
	case it.Signal == state.SignalSpotInterrupted || it.Signal == state.SignalFailed:
		w.done = true
		g.terminate(ctx, "its agent reported "+string(it.Signal), *it)
	default:
		left++
	}
	return ready, left
}

// offer puts deregistered instances back into their pools; those of a pool whose reuse is
// never are terminated instead (their runners deregistered first, like any other): see
// Pool.OfferOrRetire. An offer that fails leaves the instance idle without a
// message: refresh republishes or expires it.
func (g *giving) offer(ctx context.Context, insts []*state.Instance) {
	if len(insts) == 0 {
		return
	}
	res := g.p.OfferOrRetire(ctx, nil, insts)
	for _, r := range res.Retired {
		g.retired(r.Reason, r.Retired)
	}
	if res.Err != nil {
		g.warn("%v", res.Err)
	}
	for _, in := range res.Offered {
		g.outcome(*in, Returned, "")
	}
}

// retired reports what a Retire did: the instances retired are terminated, those someone else
// moved first are theirs.
func (g *giving) retired(reason string, res Retired) {
	if res.Err != nil {
		g.warn("terminate: %v (an instance whose item is terminated is ended by its agent; refresh retries the rest)", res.Err)
	}
	for _, in := range slices.Concat(res.Ended, res.Already) {
		g.outcome(in, Terminated, reason)
	}
	for _, in := range res.Lost {
		g.outcome(in, Already, "moved on before it could be terminated: "+in.Holder())
	}
}

// cleanGitHub deletes the runners this stack registered for the run on the instances ours
// accepts, found by the names Hangar gave them (RunnerNames), never by label: a runner that
// merely carries the run id among its labels is someone else's. No instance holds a token that
// could remove its runner: this is how the run's runners leave GitHub, once their agents have
// stopped them (DEREGISTERED) or their instances are terminated.
func (g *giving) cleanGitHub(ctx context.Context, ours func(instanceID string) bool) {
	runners, err := g.gb.GitHub.Runners(ctx)
	if err != nil {
		g.warn("check GitHub for runners of run %s: %v", g.run, err)
		return
	}
	for _, x := range runners {
		id, run, ok := g.gb.Names.Parse(x.Name)
		if !ok || run != g.run || !ours(id) {
			continue
		}
		if err := g.gb.GitHub.DeleteRunner(ctx, x.ID); err != nil {
			g.warn("delete runner %s: %v", x.Name, err)
			continue
		}
		g.p.log().Info("deleted the run's runner", "runner", x.Name)
		g.mu.Lock()
		g.res.RunnersDeleted++
		g.mu.Unlock()
	}
}
