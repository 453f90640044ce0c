package operator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// Cost groupings.
const (
	ByRepository = "repository"
	ByPool       = "pool"
	ByRun        = "run"
	ByDay        = "day"
)

// CostRow is the cost of one group: what runs held (instance-seconds × each instance's price,
// ended and ongoing), and, grouped by pool, what the pool's instances cost over the window
// whether a run held them or not (warm and idle time included).
type CostRow struct {
	Key       string  `json:"key"`
	Runs      int     `json:"runs"`
	Instances int     `json:"instances"`
	Hours     float64 `json:"instanceHours"`
	Cost      float64 `json:"costUsd"`
	// UnknownHours are instance-hours whose price is unknown: Cost leaves them out.
	UnknownHours float64 `json:"priceUnknownHours"`
	// PoolHours and PoolCost, grouped by pool only: every instance of the pool, alive in the
	// window, from its launch (or the window's start) to its end (or the window's end).
	PoolHours        float64 `json:"poolInstanceHours,omitempty"`
	PoolCost         float64 `json:"poolCostUsd,omitempty"`
	PoolUnknownHours float64 `json:"poolPriceUnknownHours,omitempty"`
}

// Cost groups the window's cost by repository, pool, run or day (UTC, by when the instance was
// assigned), most expensive first (days in order).
func (i *Operator) Cost(ctx context.Context, by string, w Window) ([]CostRow, error) {
	key, err := groupBy(by)
	if err != nil {
		return nil, err
	}
	held, err := i.held(ctx, w)
	if err != nil {
		return nil, err
	}
	rows := map[string]*CostRow{}
	runs := map[string]map[string]bool{}
	row := func(k string) *CostRow {
		if rows[k] == nil {
			rows[k] = &CostRow{Key: k}
			runs[k] = map[string]bool{}
		}
		return rows[k]
	}
	for _, h := range held {
		k := key(h)
		r := row(k)
		r.Instances++
		runs[k][fmt.Sprintf("%s#%d", h.Run, h.Attempt)] = true
		r.Hours += h.Seconds / 3600
		if h.PriceKnown {
			r.Cost += h.Cost
		} else {
			r.UnknownHours += h.Seconds / 3600
		}
	}
	for k, r := range rows {
		r.Runs = len(runs[k])
	}
	if by == ByPool {
		if err := i.poolSpend(ctx, w, row); err != nil {
			return nil, err
		}
	}
	out := make([]CostRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b CostRow) int {
		if by == ByDay {
			return cmp.Compare(a.Key, b.Key)
		}
		return cmp.Or(cmp.Compare(b.Cost+b.PoolCost, a.Cost+a.PoolCost), cmp.Compare(a.Key, b.Key))
	})
	return out, nil
}

// CheckBy refuses a cost grouping Cost does not know, before anything is read.
func CheckBy(by string) error {
	_, err := groupBy(by)
	return err
}

func groupBy(by string) (func(Held) string, error) {
	switch by {
	case ByRepository:
		return func(h Held) string { return h.Repo }, nil
	case ByPool:
		return func(h Held) string { return h.Pool }, nil
	case ByRun:
		return func(h Held) string { return fmt.Sprintf("%s (attempt %d) %s", h.Run, h.Attempt, h.Repo) }, nil
	case ByDay:
		return func(h Held) string { return h.AssignedAt.UTC().Format(time.DateOnly) }, nil
	}
	return nil, fmt.Errorf("%w: --by %q: want repository, pool, run or day", ErrBadInput, by)
}

// poolSpend adds each pool's whole instance time in the window: the instances that ended in it
// (their items are kept as history) and the live ones.
func (i *Operator) poolSpend(ctx context.Context, w Window, row func(string) *CostRow) error {
	docs, err := i.pools(w.Pools)
	if err != nil {
		return err
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	add := func(pool string, insts []state.Instance, err error, live bool) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
		}
		r := row(pool)
		for _, in := range insts {
			end := w.Until
			if !live {
				end = in.Threshold // when it ended
			}
			start := in.LaunchedAt
			if start.Before(w.Since) {
				start = w.Since
			}
			if in.LaunchedAt.IsZero() || !end.After(start) {
				continue
			}
			hours := end.Sub(start).Hours()
			r.PoolHours += hours
			if in.PriceSource != "" {
				r.PoolCost += hours * in.Price
			} else {
				r.PoolUnknownHours += hours
			}
		}
	}
	for _, doc := range docs {
		wg.Go(func() {
			ended, err := i.d.History.Ended(ctx, doc.Name, w.Since, w.Until)
			add(doc.Name, ended, err, false)
		})
		for _, st := range state.LiveStates {
			wg.Go(func() {
				items, err := i.d.History.InPoolState(ctx, doc.Name, st)
				add(doc.Name, items, err, true)
			})
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("read the pools' instances: %w", errors.Join(errs...))
	}
	return nil
}
