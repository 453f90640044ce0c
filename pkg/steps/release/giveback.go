package release

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
	"github.com/hangar-ci/hangar/pkg/pool"
)

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
		for i, w := range g.returner().IdleAll(ctx, backs) {
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

// backs is how insts go back to idle: each with its idle deadline, from its item (state.Home)
// or, for an item that does not say, its pool's document. An instance whose document cannot be
// read then is terminated instead (pool.NotReusable).
func (g *giving) backs(ctx context.Context, insts []state.Instance, unacknowledged bool, reason string) []pool.Back {
	backs := make([]pool.Back, 0, len(insts))
	for _, in := range insts {
		idle := in.IdleTimeout()
		if !in.Known() {
			doc, err := g.d.Pools.Pool(ctx, in.Pool)
			if err != nil {
				g.terminate(ctx, pool.NotReusable(&in, nil, err), in)
				continue
			}
			idle = doc.Timeout(state.Idle)
		}
		backs = append(backs, pool.Back{Instance: in, Idle: idle, RunID: g.run, Unacknowledged: unacknowledged, Reason: reason})
	}
	return backs
}

// home is the pool document an instance's way back needs: none when its item says (state.Home),
// else its pool's.
func (g *giving) home(ctx context.Context, in *state.Instance) (*pooldoc.Document, error) {
	if in.Known() {
		return nil, nil
	}
	return g.d.Pools.Pool(ctx, in.Pool)
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
		for i, w := range g.returner().IdleAll(ctx, backs) {
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
	wctx, cancel := context.WithTimeout(ctx, g.cfg.DeregisterTimeout)
	defer cancel()
	err := wait.Sleep(wctx, g.firstRead(waiting))
	if err == nil {
		err = g.d.Store.Poll(wctx, ids, g.cfg.PollInterval, func(items map[string]*state.Instance) (bool, time.Duration) {
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
	g.terminate(ctx, fmt.Sprintf("its agent did not deregister within %s", g.cfg.DeregisterTimeout), stuck...)
}

// maxFirstRead bounds how long release waits before its first read of the items it gave back:
// an agent's deregMs is the instance's own report, so a compromised one can delay only its own
// release, and by this much at most.
const maxFirstRead = 2 * time.Second

// firstReadMargin is what an agent's deregMs leaves out of the time release waits on: the ring's
// delivery and the agent's DEREGISTERED write (two round trips), with room to spare: on a busy
// host a ring takes tens of milliseconds to arrive, and a read that comes too soon costs one more.
const firstReadMargin = 60 * time.Millisecond

// firstRead is how long to wait after the ring before reading the items at all: a little longer
// than their agents took to deregister last time (their items' deregMs; of several, the median,
// so that the faster half is offered without waiting for the slowest, and the poll's backoff
// finds the rest) and firstReadMargin, less the poll's own first wait (a quarter of the interval, state.Store.Poll).
// It is zero when an agent has not reported one (its first release), and at most maxFirstRead
// and half the deregister timeout. One read then usually finds an agent done, where polling from
// the ring took three.
func (g *giving) firstRead(waiting []*releasing) time.Duration {
	took := make([]int64, len(waiting))
	for i, w := range waiting {
		took[i] = w.inst.DeregisterMs
	}
	reported := state.Reported(took, false)
	if reported == 0 {
		return 0
	}
	d := reported + firstReadMargin - g.cfg.PollInterval/4
	return min(max(d, 0), maxFirstRead, g.cfg.DeregisterTimeout/2)
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
// pool.Returner.OfferOrRetire. An offer that fails leaves the instance idle without a
// message: refresh republishes or expires it.
func (g *giving) offer(ctx context.Context, insts []*state.Instance) {
	if len(insts) == 0 {
		return
	}
	res := g.returner().OfferOrRetire(ctx, g.home, insts)
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
func (g *giving) retired(reason string, res pool.Retired) {
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

// returner gives instances back to their pools.
func (g *giving) returner() *pool.Returner {
	return &pool.Returner{Store: g.d.Store, Offers: g.d.Pools, Retirer: g.retire, Bells: g.d.Bells, Log: g.d.Log}
}
