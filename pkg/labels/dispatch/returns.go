package dispatch

import (
	"context"
	"errors"
	"fmt"

	"github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// returned serves an agent's word that it has finished a job (the returns queue). The message is
// a hint from an instance: only what the instance's item says is acted on. An item still holding
// the job whose agent signalled DEREGISTERED for it goes back to idle (the completed webhook may
// not have come yet; one conditional write wins); one already given back is taken back now that
// its agent has wiped it; one whose agent FAILED is terminated. What comes back (an instance,
// or the room one leaves) is returned for the batch's wakes (comeBack).
func (x *Dispatcher) returned(ctx context.Context, m Message) (*back, error) {
	r, err := jobs.ParseReturn(m.Body)
	if err != nil {
		x.d.Log.Error("a returns message that is not one; dropped", "message", m.ID, "error", err)
		return nil, nil
	}
	// A write that loses to the completed webhook's (or a check's) is read again: the instance
	// is then given back, and is taken back here.
	for range 3 {
		again, b, err := x.returnOnce(ctx, r)
		if !again {
			if b != nil {
				b.msg = m.ID
			}
			return b, err
		}
	}
	return nil, nil
}

// back is what a return leaves to its batch's wakes: an instance back in its pool, idle and
// wiped (in), or the room one that ended left (in nil). msg is the return's message, delivered
// again should the instance be neither handed on nor offered.
type back struct {
	msg string
	doc *pooldoc.Document
	in  *state.Instance
}

// returnOnce acts on a return as the item now says; it reports whether its write lost and the
// item should be read again.
func (x *Dispatcher) returnOnce(ctx context.Context, r jobs.Return) (bool, *back, error) {
	it, err := x.d.Pool.Store.Get(ctx, r.InstanceID)
	if errors.Is(err, state.ErrNotFound) || errors.Is(err, state.ErrBadItem) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	doc, err := x.pool(ctx, it.Pool)
	if err != nil {
		return false, nil, err
	}
	holds := it.RunID == r.Key && serving(it.State)
	gaveBack := it.State == state.Idle && it.RunID == "" && it.LastRunID == r.Key
	wiped := it.Signal == state.SignalDeregistered && it.SignalRun == r.Key
	failed := it.Signal == state.SignalFailed
	noRunner := it.Signal == state.SignalRegisterFailed && it.SignalRun == r.Key
	switch {
	case holds && noRunner:
		// The agent could not start the job's runner (it cleaned up first): the instance goes
		// back, counted (retired at the second failure in a row), and the job gets another.
		return false, nil, x.notStarted(ctx, it, doc, r.Key)
	case (holds || gaveBack) && failed:
		if holds {
			// Its runner goes with it: the job gets another now, not at its check (placed again
			// once per lost runner, and not if it has started).
			made, _, _ := names.ParseJobKey(r.Key)
			if err := x.redispatch(ctx, made, r.Key, jobs.Job{}); err != nil {
				return false, nil, err
			}
		}
		res := x.d.Pool.Retire(ctx, []state.Instance{*it}, pool.Because("its agent failed after job "+r.Key+": "+it.SignalLog))
		if res.Err != nil {
			return false, nil, res.Err
		}
		return false, &back{doc: doc}, nil // room to create one
	case holds && wiped:
		if r.Lost && it.RunnerID != 0 && it.Installation != 0 {
			// The runner died with the agent mid-job: GitHub still lists it.
			if err := x.deleteRunner(ctx, it.Installation, scopeOf(doc, it.Repo), it.RunnerID, 0); err != nil {
				x.d.Log.Warn("delete the runner an agent lost", "instance", it.ID, "runner", it.RunnerID, "error", err)
			}
		}
		out, err := x.d.Pool.ToIdle(ctx, pool.Back{Instance: *it, Idle: doc.Timeout(state.Idle), RunID: r.Key, Reason: "its agent finished " + names.Describe(r.Key)})
		if errors.Is(err, state.ErrConflict) {
			return true, nil, nil
		}
		if err != nil {
			return false, nil, err
		}
		return false, &back{doc: doc, in: out}, nil
	case gaveBack && wiped:
		return false, &back{doc: doc, in: it}, nil
	}
	return false, nil, nil
}

// comeBack takes back into their pools what a batch's returns brought: each instance is handed
// straight to a job waiting for room in its pool (wake), or else offered; one its pool may not
// have again is retired, and the room it leaves, like an ended instance's, goes to a waiting
// job. It returns the ids of the returns to deliver again (an instance neither handed on nor
// offered).
func (x *Dispatcher) comeBack(ctx context.Context, backs []back) []string {
	return eachPool(backs, func(b back) string { return b.doc.Name }, func(_ string, list []back) []string {
		return x.comeBackTo(ctx, list)
	})
}

// comeBackTo is comeBack for one pool's returns.
func (x *Dispatcher) comeBackTo(ctx context.Context, list []back) []string {
	doc := list[0].doc
	var (
		ins    []*state.Instance
		rooms  int
		failed []string
	)
	msgOf := map[string]string{}
	for _, b := range dedupe(list) {
		switch {
		case b.in == nil:
			rooms++
		case pool.NotReusable(b.in, doc) != "":
			if err := x.offer(ctx, doc, b.in); err != nil { // retires it
				x.d.Log.Error("retire an instance back that its pool may not have again", "instance", b.in.ID, "error", err)
				failed = append(failed, b.msg)
				continue
			}
			rooms++
		default:
			ins = append(ins, b.in)
			msgOf[b.in.ID] = b.msg
		}
	}
	start := x.d.Now()
	took, spare := x.wake(ctx, doc, ins, 0)
	var left []*state.Instance
	for _, in := range ins {
		if !took[in.ID] {
			left = append(left, in)
		}
	}
	if err := x.d.Pool.Offer(ctx, left...); err != nil {
		x.d.Log.Error("offer instances back in the pool; their returns come again", "pool", doc.Name, "instances", len(left), "error", err)
		for _, in := range left {
			failed = append(failed, msgOf[in.ID])
		}
	}
	x.d.Log.Info("instances back in the pool", "pool", doc.Name, "handedOn", len(took), "offered", len(left), "rooms", rooms,
		"ms", x.d.Now().Sub(start).Milliseconds())
	// Room goes to waiting jobs once the instances not handed on are offered: a creation for
	// them may take a while, and the offers are for anyone.
	if rooms+spare > 0 {
		x.wake(ctx, doc, nil, rooms+spare)
	}
	return failed
}

// dedupe keeps one back per instance, the newest (a return delivered twice, or forged for
// another instance, must not wake a job for each copy), and every room.
func dedupe(list []back) []back {
	out := list[:0:0]
	at := map[string]int{}
	for _, b := range list {
		if b.in == nil {
			out = append(out, b)
			continue
		}
		if i, ok := at[b.in.ID]; ok {
			if b.in.Version > out[i].in.Version {
				out[i] = b
			}
			continue
		}
		at[b.in.ID] = len(out)
		out = append(out, b)
	}
	return out
}

// offer offers an instance that has served a job to its pool, or retires it when its item or its
// pool's document, doc, as the dispatcher has it now, says the pool may not have it again
// (drained, or reuse never).
func (x *Dispatcher) offer(ctx context.Context, doc *pooldoc.Document, it *state.Instance) error {
	res := x.d.Pool.OfferOrRetire(ctx, doc, []*state.Instance{it})
	for _, r := range res.Retired {
		if r.Err != nil {
			return fmt.Errorf("retire %s (%s): %w", it.ID, r.Reason, r.Err)
		}
	}
	return res.Err
}

// notStarted gives back an instance whose agent could not start its job's runner, and places the
// job again. Its runner is deleted first: it was made but never ran.
func (x *Dispatcher) notStarted(ctx context.Context, it *state.Instance, doc *pooldoc.Document, key string) error {
	if it.RunnerID != 0 && it.Installation != 0 {
		if err := x.deleteRunner(ctx, it.Installation, scopeOf(doc, it.Repo), it.RunnerID, 0); err != nil {
			return err
		}
	}
	if it.RegisterFailures+1 >= state.MaxRegisterFailures {
		res := x.d.Pool.Retire(ctx, []state.Instance{*it}, pool.Because(fmt.Sprintf("its agent could not start a runner %d times in a row: %s",
			it.RegisterFailures+1, it.SignalLog)))
		if res.Err != nil {
			return res.Err
		}
	} else {
		out, err := x.d.Pool.ToIdle(ctx, pool.Back{Instance: *it, Idle: doc.Timeout(state.Idle), RunID: key, RegisterFailed: it.State == state.Claimed,
			Reason: "its agent could not start the job's runner: " + it.SignalLog})
		if errors.Is(err, state.ErrConflict) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := x.offer(ctx, doc, out); err != nil {
			return err
		}
	}
	made, _, _ := names.ParseJobKey(key)
	return x.redispatch(ctx, made, key, jobs.Job{})
}

// serving reports whether an instance in st, holding a job's key, is serving the job: created for
// it or claimed (its runner waiting, or running a job whose in_progress is not handled yet), or
// running. A short job can be over, and its agent's return here, before its in_progress is.
func serving(st state.State) bool {
	return st == state.Created || st == state.Claimed || st == state.Running
}
