package pool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awserr"
)

// Retired is what a Retire did.
type Retired struct {
	// Ended are the instances whose item this call marked terminated, as they were given; they
	// were handed to EC2.
	Ended []state.Instance
	// Already are the instances whose item was terminated already (given so, or marked by someone
	// else first); they were handed to EC2 too (terminating twice is harmless).
	Already []state.Instance
	// Lost are the instances someone else moved first, as they are now (as given when unknown):
	// not terminated.
	Lost []state.Instance
	// Err joins the failures: items that could not be written, EC2 requests that failed.
	Err error
}

// Reason says why an instance is retired.
type Reason func(state.Instance) string

// Because is a Reason that is the same for every instance.
func Because(why string) Reason { return func(state.Instance) string { return why } }

// Retire marks each instance terminated, conditional on its state, run and version as given,
// then terminates on EC2 those whose item is now terminated. The marks go in one request
// (TransitionAll: bulk, then singles for what a cancelled transaction leaves). An instance given
// in state terminated is not written again but still handed to EC2 (terminating twice is
// harmless).
func (p *Pool) Retire(ctx context.Context, insts []state.Instance, reason Reason) Retired {
	var (
		out     Retired
		errs    []error
		changes []state.Change
		befores []state.Instance
	)
	for _, in := range insts {
		if in.State == state.Terminated {
			out.Already = append(out.Already, in)
			continue
		}
		changes = append(changes, p.retirement(in, reason(in)))
		befores = append(befores, in)
	}
	if len(changes) > 0 {
		for i, w := range p.Store.TransitionAll(ctx, changes, befores) {
			m, err := p.marked(befores[i], w.Err)
			switch {
			case err != nil:
				errs = append(errs, err)
			case m.outcome == marked:
				out.Ended = append(out.Ended, befores[i])
			case m.outcome == already:
				out.Already = append(out.Already, befores[i])
			default:
				out.Lost = append(out.Lost, m.now)
			}
		}
	}
	p.markBroken(ctx, out.Ended)
	var ids []string
	for _, in := range slices.Concat(out.Ended, out.Already) {
		ids = append(ids, in.ID)
	}
	errs = append(errs, p.Terminate(ctx, ids))
	out.Err = errors.Join(errs...)
	return out
}

// markOutcome is what became of one instance's mark.
type markOutcome int

const (
	lost    markOutcome = iota // someone else moved it to a live state first, or it has no item
	marked                     // this call wrote terminated
	already                    // it was terminated already
)

// markResult is one mark: its outcome and, when lost, the instance as someone else left it.
type markResult struct {
	outcome markOutcome
	now     state.Instance
}

// retirement is in's move to terminated, conditional on its state, run and version as given.
func (p *Pool) retirement(in state.Instance, why string) state.Change {
	p.log().Info("retiring instance", "instance", in.ID, "pool", in.Pool, "from", in.State, "reason", why)
	return state.Change{InstanceID: in.ID, Pool: in.Pool, From: in.State, To: state.Terminated,
		Version: in.Version, RunID: in.RunID, Reason: why}
}

// marked reads the outcome of one instance's mark (the error of its conditional write).
func (p *Pool) marked(in state.Instance, err error) (markResult, error) {
	var conflict *state.ConflictError
	switch {
	case err == nil:
		return markResult{outcome: marked}, nil
	case !errors.As(err, &conflict):
		return markResult{}, fmt.Errorf("retire %s: %w", in.ID, err)
	case conflict.Current != nil && conflict.Current.State == state.Terminated:
		return markResult{outcome: already}, nil // someone ended it first
	case conflict.Current != nil:
		p.log().Info("not retiring an instance someone else moved first", "instance", in.ID, "now", conflict.Current.Holder())
		return markResult{outcome: lost, now: *conflict.Current}, nil
	default:
		return markResult{outcome: lost, now: in}, nil // no item: not Hangar's to end
	}
}

// MarkTerminated marks one instance's item terminated from whatever live state it is in (read
// first, read again when it moves meanwhile), for events that tell of a machine EC2 is ending
// already (a spot interruption, an instance shutting down): nothing is asked of EC2. It returns
// the instance as marked, or nil when it has no item or is terminated already.
func (p *Pool) MarkTerminated(ctx context.Context, id, why string) (*state.Instance, error) {
	if err := names.ValidateInstanceID(id); err != nil {
		return nil, err
	}
	for range 3 {
		in, err := p.Store.Get(ctx, id)
		if errors.Is(err, state.ErrNotFound) {
			return nil, nil // not Hangar's
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", id, err)
		}
		if in.State == state.Terminated {
			return nil, nil
		}
		w := p.Store.TransitionAll(ctx, []state.Change{p.retirement(*in, why)}, []state.Instance{*in})[0]
		m, err := p.marked(*in, w.Err)
		if err != nil {
			return nil, err
		}
		switch m.outcome {
		case marked:
			if err := p.Bells.Delete(ctx, id); err != nil {
				p.log().Warn("instance marked terminated, but its doorbell stays; refresh sweeps it", "instance", id, "error", err)
			}
			return in, nil
		case already:
			return nil, nil
		}
	}
	return nil, fmt.Errorf("mark %s terminated: its item kept changing", id)
}

// terminateBatch is how many instances one TerminateInstances request names at most.
const terminateBatch = 500

// Terminate terminates instances on EC2: one request per batch, and when a batch fails, each of
// its instances alone, so that one instance already gone (or one refused) does not keep the
// others alive; then their doorbells are deleted. Instances EC2 no longer knows are not an error. The caller must own the
// instances: their items are terminated, or they have none (orphans).
func (p *Pool) Terminate(ctx context.Context, ids []string) error {
	var errs []error
	for start := 0; start < len(ids); start += terminateBatch {
		batch := ids[start:min(start+terminateBatch, len(ids))]
		err := p.terminate(ctx, batch)
		if err == nil || len(batch) == 1 {
			errs = append(errs, awserr.IgnoreNotFound(err))
			continue
		}
		for _, id := range batch {
			errs = append(errs, awserr.IgnoreNotFound(p.terminate(ctx, []string{id})))
		}
	}
	// Their doorbells go too; an agent long-polling one is told at once and reads its item. A
	// doorbell left behind is deleted by refresh's sweep.
	if err := p.Bells.Delete(ctx, ids...); err != nil {
		p.log().Warn("instances terminated, but not all their doorbells deleted; refresh sweeps them", "error", err)
	}
	return errors.Join(errs...)
}

func (p *Pool) terminate(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := p.EC2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids}); err != nil {
		if len(ids) == 1 {
			return fmt.Errorf("terminate %s: %w", ids[0], err)
		}
		return fmt.Errorf("terminate %d instances: %w", len(ids), err)
	}
	return nil
}

// markBroken marks the spec of each retired instance whose agent failed the image contract:
// none more of it is launched (launchable). Only an instance that never held a run counts: the
// signal and its log are written with the instance's own credentials, which a job that reaches
// them could use to stop its pool's launches, and no job ever ran on such an instance.
func (p *Pool) markBroken(ctx context.Context, ended []state.Instance) {
	for _, in := range ended {
		if in.Signal != state.SignalFailed || in.SpecHash == "" || !state.FailsImageContract(in.SignalLog) ||
			in.State != state.Created || in.RunID != "" || in.LastRunID != "" || len(in.ServedRepos) > 0 {
			continue
		}
		b := state.BrokenSpec{Spec: in.SpecHash, Reason: state.LastLine(in.SignalLog), At: time.Now()}
		if err := p.Store.MarkBroken(ctx, in.Pool, b); err != nil {
			p.log().Error("mark the pool's spec broken; its instances go on failing", "pool", in.Pool, "spec", in.SpecHash, "error", err)
			continue
		}
		p.log().Error("the pool's image lacks what Hangar needs: none more of its spec is launched until a deploy changes it",
			"pool", in.Pool, "spec", in.SpecHash, "instance", in.ID, "reason", b.Reason)
	}
}
