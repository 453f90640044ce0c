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
// not have come yet; one conditional write wins) and is offered; one already given back is
// offered now that its agent has wiped it; one whose agent FAILED is terminated.
func (x *Dispatcher) returned(ctx context.Context, m Message) error {
	r, err := jobs.ParseReturn(m.Body)
	if err != nil {
		x.d.Log.Error("a returns message that is not one; dropped", "message", m.ID, "error", err)
		return nil
	}
	// A write that loses to the completed webhook's (or a check's) is read again: the instance
	// is then given back, and is offered here.
	for range 3 {
		again, err := x.returnOnce(ctx, r)
		if !again {
			return err
		}
	}
	return nil
}

// returnOnce acts on a return as the item now says; it reports whether its write lost and the
// item should be read again.
func (x *Dispatcher) returnOnce(ctx context.Context, r jobs.Return) (bool, error) {
	it, err := x.d.Pool.Store.Get(ctx, r.InstanceID)
	if errors.Is(err, state.ErrNotFound) || errors.Is(err, state.ErrBadItem) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	doc, err := x.pool(ctx, it.Pool)
	if err != nil {
		return false, err
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
		return false, x.notStarted(ctx, it, doc, r.Key)
	case (holds || gaveBack) && failed:
		res := x.d.Pool.Retire(ctx, []state.Instance{*it}, pool.Because("its agent failed after job "+r.Key+": "+it.SignalLog))
		if res.Err == nil {
			x.wake(ctx, doc) // room to create one
		}
		return false, res.Err
	case holds && wiped:
		if r.Lost && it.RunnerID != 0 && it.Installation != 0 {
			// The runner died with the agent mid-job: GitHub still lists it.
			if err := x.deleteRunner(ctx, it.Installation, scopeOf(doc, it.Repo), it.RunnerID, 0); err != nil {
				x.d.Log.Warn("delete the runner an agent lost", "instance", it.ID, "runner", it.RunnerID, "error", err)
			}
		}
		out, err := x.d.Pool.ToIdle(ctx, pool.Back{Instance: *it, Idle: doc.Timeout(state.Idle), RunID: r.Key, Reason: "its agent finished " + names.Describe(r.Key)})
		if errors.Is(err, state.ErrConflict) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return false, x.offerAndWake(ctx, doc, out)
	case gaveBack && wiped:
		return false, x.offerAndWake(ctx, doc, it)
	}
	return false, nil
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

// offerAndWake offers an instance back to its pool, then wakes the job that has waited longest
// for room in it: the instance (or, retired, the room it leaves) is that job's.
func (x *Dispatcher) offerAndWake(ctx context.Context, doc *pooldoc.Document, it *state.Instance) error {
	if err := x.offer(ctx, doc, it); err != nil {
		return err
	}
	x.wake(ctx, doc)
	return nil
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
