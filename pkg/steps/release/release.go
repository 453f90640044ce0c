package release

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// Deps are release's collaborators.
type Deps struct {
	// Pool gives the run's instances back; its Store is where release finds them.
	Pool *pool.Pool
	// GitHub lists and deletes the runners of the scope the run's runners are registered in. It
	// mints no token.
	GitHub pool.Runners
	// Runners names the stack's runners: release deletes runners only by these names.
	Runners state.RunnerNames
	Log     *slog.Logger
}

// Releaser gives runs' instances back. It is safe for concurrent use.
type Releaser struct {
	cfg Config
	d   Deps
}

// New returns a releaser; cfg's defaults are applied here, once.
func New(cfg Config, d Deps) (*Releaser, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := d.Pool.Validate(); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	if d.GitHub == nil {
		return nil, errors.New("release: Deps.GitHub not set")
	}
	if d.Runners.Prefix() == "" {
		return nil, errors.New("release: Deps.Runners not set: want state.RunnerNamesOf(stack)")
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &Releaser{cfg: cfg, d: d}, nil
}

// Result is a release's report: what became of each instance (pool.GivenBack) and how many
// runners other runs had left behind it deleted.
type Result struct {
	pool.GivenBack
	// LeftoversDeleted counts the runners of other runs the stack had left behind
	// (pool.RemoveLeftovers).
	LeftoversDeleted int
}

// Release gives back every instance of run.
func (r *Releaser) Release(ctx context.Context, run string) (*Result, error) {
	if err := names.ValidateRunID(run); err != nil {
		return nil, fmt.Errorf("run-id: %w", err)
	}
	insts, err := r.d.Pool.Store.ByRun(ctx, run)
	return r.ReleaseRead(ctx, run, insts, err)
}

// ReleaseRead is Release of the instances of run as the caller read them (state.ReadRun, or the
// store's ByRun) with the read's error: items left out as malformed (state.ErrBadItem) are left
// to refresh, with a warning, and the others released; any other error fails.
func (r *Releaser) ReleaseRead(ctx context.Context, run string, insts []state.Instance, readErr error) (*Result, error) {
	start := time.Now()
	if err := names.ValidateRunID(run); err != nil {
		return nil, fmt.Errorf("run-id: %w", err)
	}
	if errors.Is(readErr, state.ErrBadItem) {
		r.d.Log.Warn("some items of the run are malformed and left to refresh", "run", run, "error", readErr)
		readErr = nil
	}
	if readErr != nil {
		return nil, fmt.Errorf("find the instances of run %s: %w", run, readErr)
	}
	// First the stack's runners other runs left behind in the scope (a provision killed
	// mid-way, a release that never finished); then, at the end, every runner this stack
	// registered for the run, whether or not its instance is still in the table.
	n, warnings := r.d.Pool.RemoveLeftovers(ctx, r.d.GitHub, r.d.Runners, run)
	for _, w := range warnings {
		r.d.Log.Warn(w, "run", run)
	}
	gb := r.d.Pool.GiveBack(ctx, pool.GiveBack{Run: run, Instances: insts, GitHub: r.d.GitHub, Names: r.d.Runners, AllRunners: true,
		DeregisterTimeout: r.cfg.DeregisterTimeout, PollInterval: r.cfg.PollInterval})
	res := &Result{GivenBack: *gb, LeftoversDeleted: n}
	res.Warnings = slices.Concat(warnings, gb.Warnings)
	res.Took = time.Since(start)
	return res, nil
}
