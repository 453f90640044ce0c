package refresh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
	"github.com/hangar-ci/hangar/pkg/refresh/spend"
)

// Store is the part of the state store refresh uses.
type Store interface {
	Expired(ctx context.Context, pool string, st state.State, now time.Time) ([]state.Instance, error)
	InPoolState(ctx context.Context, pool string, st state.State) ([]state.Instance, error)
	Transition(ctx context.Context, c state.Change) (*state.Instance, error)
	TransitionAll(ctx context.Context, changes []state.Change, befores []state.Instance) []state.Written
	Create(ctx context.Context, insts []*state.Instance) error
	Lease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	ReleaseLease(ctx context.Context, name, holder string) error
	Get(ctx context.Context, id string) (*state.Instance, error)
	GetMany(ctx context.Context, ids []string) (map[string]*state.Instance, error)
}

// Spend publishes what the runs that ended in a pool cost (spend.Publisher).
type Spend interface {
	Publish(ctx context.Context, pool string) (*spend.Published, error)
}

// Pools offers instances to their pools, makes a pool's offers agree with its items, and tells
// how many offers a pool's queue holds (offers.Directory).
type Pools interface {
	Publish(ctx context.Context, insts ...*state.Instance) error
	Depth(ctx context.Context, pool string) (int, error)
	Tidy(ctx context.Context, pool string, offered []state.Instance, items offers.Items) (offers.TidyStats, error)
}

// Deps are refresh's collaborators.
type Deps struct {
	Store Store
	// Pool launches, records, retires, stops and offers; its doorbells (nil: none) are swept of
	// those left without a live instance.
	Pool  *pool.Pool
	Pools Pools
	Log   *slog.Logger
	// Metrics receives one CloudWatch embedded-metric-format line per pool; nil skips them.
	Metrics io.Writer
	// Spend publishes the cost of the runs that ended, per pool and repository (spend.Publisher;
	// nil skips it). A dry run publishes nothing.
	Spend Spend
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Config is one refresh.
type Config struct {
	Stack string
	Pools []*pooldoc.Document
	// DryRun reports what would be done and changes nothing.
	DryRun bool
	// OrphanGrace is how old an unrecorded instance must be before it counts as an orphan.
	OrphanGrace time.Duration
	// HeartbeatStale is how old a heartbeat may be before an idle instance counts as unhealthy.
	HeartbeatStale time.Duration
}

// Defaults.
const (
	DefaultOrphanGrace    = 5 * time.Minute
	DefaultHeartbeatStale = 3 * time.Minute
)

// ApplyDefaults fills unset fields.
func (c *Config) ApplyDefaults() {
	if c.OrphanGrace == 0 {
		c.OrphanGrace = DefaultOrphanGrace
	}
	if c.HeartbeatStale == 0 {
		c.HeartbeatStale = DefaultHeartbeatStale
	}
}

// Validate checks the configuration, every problem at once, each naming the field. It changes
// nothing and makes no request.
func (c Config) Validate() error {
	var errs []error
	if c.Stack == "" {
		errs = append(errs, errors.New("refresh: stack is empty"))
	}
	for _, p := range c.Pools {
		if p == nil {
			errs = append(errs, errors.New("refresh: pools: a nil pool document"))
		}
	}
	if c.OrphanGrace < 0 {
		errs = append(errs, fmt.Errorf("refresh: orphan grace %s: want more than 0", c.OrphanGrace))
	}
	if c.HeartbeatStale < 0 {
		errs = append(errs, fmt.Errorf("refresh: heartbeat stale %s: want more than 0", c.HeartbeatStale))
	}
	return errors.Join(errs...)
}

// Action is one thing refresh did (or, dry, would do) to an instance.
type Action struct {
	Instance string `json:"instance"`
	Pool     string `json:"pool"`
	Do       string `json:"do"` // terminate, launch, promote, stop, untag
	Reason   string `json:"reason"`
}

// PoolReport is one pool's part of a refresh.
type PoolReport struct {
	Pool    string         `json:"pool"`
	Target  pooldoc.Target `json:"target"`
	Idle    int            `json:"idle"`
	Stopped int            `json:"stopped"`
	Warming int            `json:"warming"`
	// Depth is about how many offers the pool's queue holds after the refresh.
	Depth int `json:"depth"`
	// OffersDropped counts the stale or duplicate offers the refresh deleted; Reoffered, the
	// idle or stopped instances it offered again because the pool held no offer of theirs.
	OffersDropped int      `json:"offersDropped"`
	Reoffered     int      `json:"reoffered"`
	Expired       int      `json:"expired"`
	Launched      int      `json:"launched"`
	Stops         int      `json:"stops"`
	ItemsRead     int      `json:"itemsRead"`
	Errors        []string `json:"errors,omitempty"`
}

// Report is what a refresh did.
type Report struct {
	Stack   string       `json:"stack"`
	DryRun  bool         `json:"dryRun"`
	Pools   []PoolReport `json:"pools"`
	Orphans int          `json:"orphans"`
	Actions []Action     `json:"actions"`
	Errors  []string     `json:"errors,omitempty"`
	TookMs  int64        `json:"tookMs"`
}

// Run refreshes every pool of cfg (in parallel) and the stack's orphans. It returns an error only
// when nothing could be done; per-pool failures are in the report.
func Run(ctx context.Context, cfg Config, d Deps) (*Report, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	start := d.Now()
	r := &run{cfg: cfg, d: d, report: &Report{Stack: cfg.Stack, DryRun: cfg.DryRun}, holder: state.NewLeaseHolder()}
	// A pool whose instance types cannot be resolved is left out of this refresh and reported.
	pools := make([]*pooldoc.Document, 0, len(cfg.Pools))
	for _, doc := range cfg.Pools {
		if err := d.Pool.Resolve(ctx, doc); err != nil {
			r.fail("%v", err)
			continue
		}
		pools = append(pools, doc)
	}
	var wg sync.WaitGroup
	reports := make([]PoolReport, len(pools))
	for i, doc := range pools {
		wg.Go(func() { reports[i] = r.pool(ctx, doc) })
	}
	wg.Go(func() { r.orphans(ctx) })
	wg.Wait()
	r.report.Pools = reports
	slices.SortFunc(r.report.Actions, func(a, b Action) int {
		if a.Pool != b.Pool {
			return strings.Compare(a.Pool, b.Pool)
		}
		return strings.Compare(a.Instance, b.Instance)
	})
	r.report.TookMs = d.Now().Sub(start).Milliseconds()
	for _, p := range reports {
		r.emitMetrics(p)
	}
	r.publishSpend(ctx, pools)
	return r.report, nil
}

// run is one refresh in progress.
type run struct {
	holder string // this refresh's name on leases
	cfg    Config
	d      Deps
	mu     sync.Mutex
	report *Report
}

func (r *run) act(a Action) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.report.Actions = append(r.report.Actions, a)
	r.d.Log.Info("refresh", "do", a.Do, "instance", a.Instance, "pool", a.Pool, "reason", a.Reason, "dryRun", r.cfg.DryRun)
}

func (r *run) fail(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.report.Errors = append(r.report.Errors, msg)
	r.d.Log.Error(msg)
}

// terminate retires instances (each conditional on the version read; dry, only reports) and
// returns those it ended. An instance someone else moved first (a claim, another refresh) is
// theirs now and is left alone.
func (r *run) terminate(ctx context.Context, insts []state.Instance, reason pool.Reason) ([]state.Instance, error) {
	for _, in := range insts {
		r.act(Action{Instance: in.ID, Pool: in.Pool, Do: "terminate", Reason: reason(in)})
	}
	if r.cfg.DryRun || len(insts) == 0 {
		return nil, nil
	}
	res := r.d.Pool.Retire(ctx, insts, reason)
	return res.Ended, res.Err
}
