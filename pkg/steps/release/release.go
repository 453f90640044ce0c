package release

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
)

// Store is the part of the state store release uses.
type Store interface {
	ByRun(ctx context.Context, run string) ([]state.Instance, error)
	Get(ctx context.Context, id string) (*state.Instance, error)
	Transition(ctx context.Context, c state.Change) (*state.Instance, error)
	TransitionAll(ctx context.Context, changes []state.Change, befores []state.Instance) []state.Written
	Poll(ctx context.Context, ids []string, interval time.Duration, check func(map[string]*state.Instance) (done bool, next time.Duration)) error
	GetMany(ctx context.Context, ids []string) (map[string]*state.Instance, error)
}

// GitHub is the part of the GitHub API release uses: it lists the scope's runners and deletes
// the stack's runners of the run, and leftovers (Leftovers). It mints no token.
type GitHub interface {
	Runners(ctx context.Context) ([]ghapi.Runner, error)
	DeleteRunner(ctx context.Context, id int64) error
}

// EC2 terminates instances.
type EC2 interface {
	TerminateInstances(ctx context.Context, params *ec2.TerminateInstancesInput, optFns ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
}

// Pools gives pool documents by name and offers idle instances to their pools (pool.Directory).
type Pools interface {
	Pool(ctx context.Context, name string) (*pooldoc.Document, error)
	Publish(ctx context.Context, insts ...*state.Instance) error
}

// Deps are release's collaborators.
type Deps struct {
	Store  Store
	GitHub GitHub
	EC2    EC2
	Pools  Pools
	// Runners names the stack's runners: release deletes runners only by these names.
	Runners state.RunnerNames
	// Bells rings the instances release gives back (nil: none; their agents poll their items).
	Bells *doorbell.Bells
	Log   *slog.Logger
}

// Releaser gives runs' instances back. It is safe for concurrent use.
type Releaser struct {
	cfg    Config
	d      Deps
	retire *pool.Retirer
}

// New returns a releaser; cfg's defaults are applied here, once.
func New(cfg Config, d Deps) (*Releaser, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Runners.Prefix() == "" {
		return nil, errors.New("release: Deps.Runners not set: want state.RunnerNamesOf(stack)")
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &Releaser{cfg: cfg, d: d, retire: &pool.Retirer{Store: d.Store, EC2: d.EC2, Bells: d.Bells, Log: d.Log}}, nil
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

// Result is a release's report.
type Result struct {
	Instances []Outcome
	// RunnersDeleted counts the run's runners release deleted from GitHub.
	RunnersDeleted int
	// LeftoversDeleted counts the runners of other runs the stack had left behind (Leftovers).
	LeftoversDeleted int
	Warnings         []string
	Took             time.Duration
}

// Outcomes.
const (
	Returned   = "returned"
	Terminated = "terminated"
	Already    = "already released"
)

// Release gives back every instance of run.
func (r *Releaser) Release(ctx context.Context, run string) (*Result, error) {
	if err := state.ValidateRunID(run); err != nil {
		return nil, fmt.Errorf("run-id: %w", err)
	}
	insts, err := r.d.Store.ByRun(ctx, run)
	return r.ReleaseRead(ctx, run, insts, err)
}

// ReleaseRead is Release of the instances of run as the caller read them (state.ReadRun, or the
// store's ByRun) with the read's error: items left out as malformed (state.ErrBadItem) are left
// to refresh, with a warning, and the others released; any other error fails.
func (r *Releaser) ReleaseRead(ctx context.Context, run string, insts []state.Instance, readErr error) (*Result, error) {
	if err := state.ValidateRunID(run); err != nil {
		return nil, fmt.Errorf("run-id: %w", err)
	}
	if errors.Is(readErr, state.ErrBadItem) {
		r.d.Log.Warn("release: some items of the run are malformed and left to refresh", "run", run, "error", readErr)
		readErr = nil
	}
	if readErr != nil {
		return nil, fmt.Errorf("find the instances of run %s: %w", run, readErr)
	}
	// First the stack's runners other runs left behind in the scope (a provision killed
	// mid-way, a release that never finished); then, at the end, every runner this stack
	// registered for the run, whether or not its instance is still in the table.
	g := r.start(run)
	g.removeLeftovers(ctx)
	return g.giveBack(ctx, insts, func(string) bool { return true }), nil
}

// GiveBack releases the given instances of run (their items as last read): those serving the
// run go back to their pools once their agents deregister, those still booting for it are
// terminated, the others are left alone. Then no runner of those instances may remain on GitHub;
// runners of the run's other instances (another provision of the same run) are not touched.
func (r *Releaser) GiveBack(ctx context.Context, run string, insts []state.Instance) *Result {
	mine := make(map[string]bool, len(insts))
	for _, in := range insts {
		mine[in.ID] = true
	}
	return r.start(run).giveBack(ctx, insts, func(id string) bool { return mine[id] })
}

func (r *Releaser) start(run string) *giving {
	return &giving{Releaser: r, run: run, start: time.Now(), res: &Result{}, held: map[string]state.Instance{}}
}

// giveBack gives insts back, then deletes the runners of the run on the instances ours accepts.
func (g *giving) giveBack(ctx context.Context, insts []state.Instance, ours func(instanceID string) bool) *Result {
	g.giveBackAll(ctx, insts)
	g.cleanGitHub(ctx, ours)
	slices.SortFunc(g.res.Instances, func(a, b Outcome) int { return strings.Compare(a.ID, b.ID) })
	g.res.Took = time.Since(g.start)
	return g.res
}

// giving is one GiveBack in progress.
type giving struct {
	*Releaser
	run   string
	start time.Time
	mu    sync.Mutex
	res   *Result
	// held are the run's instances as first read, for what the run held them and their price.
	held map[string]state.Instance
}

func (g *giving) warn(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	g.d.Log.Warn(msg, "run", g.run)
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
	g.retired(reason, g.retire.Retire(ctx, insts, pool.Because(reason)))
}
