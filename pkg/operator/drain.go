package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// Documents marks pool documents drained or not (pooldoc.SetDrained on the stack's SSM).
type Documents interface {
	SetDrained(ctx context.Context, pool string, drained bool) (*pooldoc.Document, error)
}

// Retirer ends instances, item first, then EC2 (pool.Pool).
type Retirer interface {
	Retire(ctx context.Context, insts []state.Instance, reason pool.Reason) pool.Retired
}

// DrainReport is what a drain or undrain did.
type DrainReport struct {
	Pool    string `json:"pool"`
	Drained bool   `json:"drained"`
	// Retired are the idle, stopped and warm instances terminated now.
	Retired []string `json:"retired"`
	// Serving are the instances that hold runs, marked to retire: they finish them, then end.
	Serving []string `json:"serving"`
	// Lost are the instances that moved from run to run while the drain followed them (claims
	// in flight): left to refresh, which retires a drained pool's idle instances.
	Lost []string `json:"lost,omitempty"`
}

// Marker marks an instance serving a run to be retired when the run gives it back
// (state.Store.MarkRetire): the item as written and true, or the item as it is (nil: none) and
// false when it no longer serves that run.
type Marker interface {
	MarkRetire(ctx context.Context, id, run, why string) (*state.Instance, bool, error)
}

// markTries bounds how often drain follows one instance from run to run (a claim racing the
// drain) before it leaves it to refresh, which retires a drained pool's idle instances.
const markTries = 3

// Drain closes pool to reuse: its document is marked drained, so nothing of it is claimed or
// offered any more and refresh keeps none warm; then every instance serving a run is marked to
// retire (state.Home.Retire), so that whoever gives it back when the run ends terminates it
// instead of offering it, by its item alone; and its idle, stopped and warm instances are
// terminated now. An instance given back between the read and the mark is terminated as idle;
// one claimed between the read and its termination (a provision that read the document before
// the drain) is marked for the run that took it.
func (i *Operator) Drain(ctx context.Context, name string) (*DrainReport, error) {
	if err := i.writable(name); err != nil {
		return nil, err
	}
	if _, err := i.d.Documents.SetDrained(ctx, name, true); err != nil {
		return nil, fmt.Errorf("drain pool %s: %w", name, err)
	}
	rep := &DrainReport{Pool: name, Drained: true}
	var idle, serving []state.Instance
	var errs []error
	for _, st := range state.LiveStates {
		items, err := i.d.History.InPoolState(ctx, name, st)
		if err != nil {
			errs = append(errs, err)
		}
		for _, in := range items {
			switch {
			case in.RunID != "":
				serving = append(serving, in)
			case st == state.Idle || st == state.Stopped || st == state.Created:
				idle = append(idle, in)
			}
		}
	}
	for try := 0; try < markTries && len(serving)+len(idle) > 0; try++ {
		var freed, again []state.Instance
		for _, in := range serving {
			cur, marked, err := i.d.Marker.MarkRetire(ctx, in.ID, in.RunID, pooldoc.DrainedReason)
			switch {
			case err != nil:
				errs = append(errs, err)
			case marked:
				rep.Serving = append(rep.Serving, in.ID)
			case cur == nil || cur.State == state.Terminated:
			case cur.RunID != "":
				again = append(again, *cur) // another run took it meanwhile: marked for that one
			case cur.State == state.Idle || cur.State == state.Stopped || cur.State == state.Created:
				freed = append(freed, *cur) // given back meanwhile: ended now, as idle
			}
		}
		res := i.d.Retirer.Retire(ctx, append(idle, freed...), pool.Because(pooldoc.DrainedReason))
		for _, in := range slices.Concat(res.Ended, res.Already) {
			rep.Retired = append(rep.Retired, in.ID)
		}
		if res.Err != nil {
			errs = append(errs, res.Err)
		}
		for _, in := range res.Lost {
			if in.RunID != "" && in.State != state.Terminated {
				again = append(again, in) // claimed meanwhile: marked for the run that took it
			}
		}
		serving, idle = again, nil
	}
	for _, in := range serving {
		rep.Lost = append(rep.Lost, in.ID)
	}
	// The retired instances' offers are stale now: deleted, so that the queue holds nothing.
	if _, err := i.d.Queues.Tidy(ctx, name, nil, i.d.Store); err != nil {
		errs = append(errs, err)
	}
	slices.Sort(rep.Retired)
	slices.Sort(rep.Serving)
	if len(errs) > 0 {
		return rep, fmt.Errorf("pool %s is drained, but not all of it was retired (refresh retires the rest): %w", name, errors.Join(errs...))
	}
	return rep, nil
}

// Undrain opens pool to reuse again: its document loses the drained mark, and refresh fills its
// warm pool at its next pass.
func (i *Operator) Undrain(ctx context.Context, name string) (*DrainReport, error) {
	if err := i.writable(name); err != nil {
		return nil, err
	}
	if _, err := i.d.Documents.SetDrained(ctx, name, false); err != nil {
		return nil, fmt.Errorf("undrain pool %s: %w", name, err)
	}
	return &DrainReport{Pool: name}, nil
}

func (i *Operator) writable(name string) error {
	if _, err := i.pools([]string{name}); err != nil {
		return err
	}
	if i.d.Documents == nil || i.d.Retirer == nil || i.d.History == nil || i.d.Marker == nil {
		return errors.New("operator: Deps.Documents, Deps.Retirer, Deps.History and Deps.Marker must be set to drain")
	}
	return nil
}
