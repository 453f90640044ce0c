package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hangar-ci/hangar/pkg/lifecycle"
	"github.com/hangar-ci/hangar/pkg/poolconfig"
	"github.com/hangar-ci/hangar/pkg/state"
)

// Documents marks pool documents drained or not (poolconfig.SetDrained on the stack's SSM).
type Documents interface {
	SetDrained(ctx context.Context, pool string, drained bool) (*poolconfig.Document, error)
}

// Retirer ends instances, item first, then EC2 (lifecycle.Retirer).
type Retirer interface {
	Retire(ctx context.Context, insts []state.Instance, reason lifecycle.Reason) lifecycle.Retired
}

// DrainReport is what a drain or undrain did.
type DrainReport struct {
	Pool    string `json:"pool"`
	Drained bool   `json:"drained"`
	// Retired are the idle, stopped and warm instances terminated now.
	Retired []string `json:"retired"`
	// Serving are the instances that hold runs: they finish them, then end.
	Serving []string `json:"serving"`
	// Lost are the instances someone else moved first (a claim in flight): the drained
	// document keeps them from being offered again.
	Lost []string `json:"lost,omitempty"`
}

// Drain closes pool to reuse: its document is marked drained, so nothing of it is claimed or
// offered any more and refresh keeps none warm; then its idle, stopped and warm instances are
// terminated now. Instances serving runs finish them, and are terminated when they end (release,
// the dispatcher and refresh retire a drained pool's instances instead of offering them).
func (i *Inspector) Drain(ctx context.Context, pool string) (*DrainReport, error) {
	if err := i.writable(pool); err != nil {
		return nil, err
	}
	if _, err := i.d.Documents.SetDrained(ctx, pool, true); err != nil {
		return nil, fmt.Errorf("drain pool %s: %w", pool, err)
	}
	rep := &DrainReport{Pool: pool, Drained: true}
	var idle []state.Instance
	var errs []error
	for _, st := range state.LiveStates {
		items, err := i.d.History.InPoolState(ctx, pool, st)
		if err != nil {
			errs = append(errs, err)
		}
		for _, in := range items {
			if in.RunID != "" {
				rep.Serving = append(rep.Serving, in.ID)
				continue
			}
			if st == state.Idle || st == state.Stopped || st == state.Created {
				idle = append(idle, in)
			}
		}
	}
	res := i.d.Retirer.Retire(ctx, idle, lifecycle.Because("its pool is drained"))
	for _, in := range slices.Concat(res.Ended, res.Already) {
		rep.Retired = append(rep.Retired, in.ID)
	}
	for _, in := range res.Lost {
		rep.Lost = append(rep.Lost, in.ID)
	}
	if res.Err != nil {
		errs = append(errs, res.Err)
	}
	// The retired instances' offers are stale now: deleted, so that the queue holds nothing.
	if _, err := i.d.Queues.Tidy(ctx, pool, nil, i.d.Store); err != nil {
		errs = append(errs, err)
	}
	slices.Sort(rep.Retired)
	slices.Sort(rep.Serving)
	if len(errs) > 0 {
		return rep, fmt.Errorf("pool %s is drained, but not all of it was retired (refresh retires the rest): %w", pool, errors.Join(errs...))
	}
	return rep, nil
}

// Undrain opens pool to reuse again: its document loses the drained mark, and refresh fills its
// warm pool at its next pass.
func (i *Inspector) Undrain(ctx context.Context, pool string) (*DrainReport, error) {
	if err := i.writable(pool); err != nil {
		return nil, err
	}
	if _, err := i.d.Documents.SetDrained(ctx, pool, false); err != nil {
		return nil, fmt.Errorf("undrain pool %s: %w", pool, err)
	}
	return &DrainReport{Pool: pool}, nil
}

func (i *Inspector) writable(pool string) error {
	if _, err := i.pools([]string{pool}); err != nil {
		return err
	}
	if i.d.Documents == nil || i.d.Retirer == nil || i.d.History == nil {
		return errors.New("inspect: Deps.Documents, Deps.Retirer and Deps.History must be set to drain")
	}
	return nil
}
