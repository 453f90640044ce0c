package provision

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// GitHub is the part of the GitHub API provision uses: the run's registration token, and the
// scope's runners (the pool deletes leftovers and the runners of what it gives back).
type GitHub interface {
	RegistrationToken(ctx context.Context) (ghapi.Token, error)
	pool.Runners
}

// Deps are provision's collaborators.
type Deps struct {
	// Doc is the pool's document.
	Doc *pooldoc.Document
	// Pool claims, creates, hands over and gives back; its Store is where provision reads the
	// run's instances. It must have doorbells: without them no token reaches an instance.
	Pool   *pool.Pool
	GitHub GitHub
	Log    *slog.Logger
	// Mask is called with every secret before it could reach a log.
	Mask func(secret string)
	// Now is the clock a claimed instance's acknowledgement bound (state.AckTimeout) is kept
	// with; time.Now when nil. A test moves it past the bound rather than wait the bound out.
	Now func() time.Time
}

// validate refuses missing collaborators (a wiring mistake) before anything happens.
func (d *Deps) validate() error {
	if err := d.Pool.Validate("Queues", "Launcher", "Bells"); err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	if d.GitHub == nil {
		return errors.New("provision: Deps.GitHub not set")
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	return nil
}

// Instance is one instance given to the run.
type Instance struct {
	ID, Type, AZ, UsageClass string
	Reused                   bool
	// Ready is how long after the start of the provision its runner was registered.
	Ready time.Duration
}

// Timing breaks a provision down.
type Timing struct {
	Claim, Create, Wait, Total time.Duration
}

// Result is a successful provision's report.
type Result struct {
	RunnerLabel string
	Instances   []Instance
	Reused      int
	Created     int
	Replaced    int
	Timing      Timing
	Warnings    []string
	// Failures are the instances given up on along the way (replaced by others).
	Failures []Failure
}

// Failure is an instance provision gave up on: why, and the end of its agent's log when the agent
// sent one (the runner's configuration output, a pre-runner script's, or its own error).
type Failure struct {
	ID, Reason, Log string
}

// Error is a failed provision: the cause, and every instance given up on, with its log tail.
// What it took was given back or terminated before Run returned.
type Error struct {
	Err      error
	Failures []Failure
	Warnings []string
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// member is one instance provision is waiting for.
type member struct {
	inst    state.Instance
	version int64 // the version provision wrote: signals must be about it or later
	reused  bool
	ready   bool
	readyAt time.Duration
	// ackBy is when a claimed instance's agent must have acknowledged the claim (ackVersion),
	// ackWithin the bound it was given (zero for created instances, which boot first).
	ackBy     time.Time
	ackWithin time.Duration
	// answered is the agent's last request for the token (state.Report.Asks) provision has
	// answered by handing the token over again.
	answered int
	// handed says the token went to a created instance once its agent was up (handOnAck).
	handed bool
}

// provisioning is one provision in progress.
type provisioning struct {
	cfg      Config
	d        Deps
	start    time.Time
	assign   state.Assignment
	types    []string
	runtime  time.Duration
	mu       sync.Mutex
	members  map[string]*member
	order    []string
	failed   []string // instances that failed this provision: never claimed again
	res      *Result
	replaced int
	token    ghapi.Token // the run's registration token, handed to each instance through its doorbell
	group    string      // the org runner group, set by check
	// handing tracks the hand-overs of claims, sent while the wait reads, and the tidying of the
	// pool messages each claim received; handedAt is when the hand-overs of the last claim began
	// to go out.
	handing  sync.WaitGroup
	handedAt time.Time
}

// Run provisions cfg.Count instances for cfg.RunID.
func Run(ctx context.Context, cfg Config, d Deps) (*Result, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := d.validate(); err != nil {
		return nil, err
	}
	// A pool that chooses its instance types by size gets them first (one DescribeInstanceTypes
	// pass), before anything is claimed.
	if d.Doc != nil {
		if err := d.Pool.Resolve(ctx, d.Doc); err != nil {
			return nil, fmt.Errorf("pool: %w", err)
		}
	}
	p := &provisioning{cfg: cfg, d: d, start: time.Now(), members: map[string]*member{}, res: &Result{RunnerLabel: cfg.RunID}}
	if err := p.check(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithDeadline(ctx, p.start.Add(cfg.RegistrationTimeout))
	defer cancel()
	defer p.handing.Wait() // every hand-over sent (or given up) before the step ends

	var housekeeping sync.WaitGroup
	housekeeping.Go(func() { p.removeOfflineRunners(context.WithoutCancel(ctx)) })
	defer housekeeping.Wait()

	if cfg.RunAttempt > 1 {
		p.replaceEarlierAttempt(ctx)
	}
	tok, err := d.GitHub.RegistrationToken(ctx)
	if err != nil {
		return nil, err
	}
	if d.Mask != nil {
		d.Mask(tok.Value)
	}
	// The assignment carries no token: the token reaches each instance through its doorbell
	// alone (handOver), never the table.
	p.token = tok
	p.assign = state.Assignment{RunID: cfg.RunID, RunAttempt: cfg.RunAttempt, Repo: cfg.Repository,
		RunnerURL: cfg.RunnerScope().RunnerURL(d.Doc.GitHubURL), Labels: cfg.Labels,
		RunnerGroup: p.group, RunnerPrefix: state.RunnerNamesOf(cfg.Stack).Prefix(), ClaimID: rand.Text(), HandOverSum: state.SecretSum(tok.Value)}

	if err := p.provision(ctx); err != nil {
		p.rollback(err)
		p.mu.Lock()
		defer p.mu.Unlock()
		return nil, &Error{Err: err, Failures: p.res.Failures, Warnings: p.res.Warnings}
	}
	p.report()
	return p.res, nil
}

// report fills the result once every instance is ready.
func (p *provisioning) report() {
	p.res.Timing.Total = time.Since(p.start)
	for _, id := range p.order {
		m := p.members[id]
		p.res.Instances = append(p.res.Instances, Instance{ID: id, Type: m.inst.InstanceType, AZ: m.inst.AZ,
			UsageClass: m.inst.UsageClass, Reused: m.reused, Ready: m.readyAt})
		if m.reused {
			p.res.Reused++
		} else {
			p.res.Created++
		}
	}
	p.res.Replaced = p.replaced
}

// provision acquires and waits, replacing failures, until every instance is ready.
func (p *provisioning) provision(ctx context.Context) error {
	need := p.cfg.Count
	maxReplacements := p.cfg.Count + 2
	for {
		if err := p.acquire(ctx, need); err != nil {
			return err
		}
		waitStart := time.Now()
		failed, err := p.wait(ctx)
		p.res.Timing.Wait += time.Since(waitStart)
		if err != nil {
			return err
		}
		if failed == 0 {
			return nil
		}
		p.replaced += failed
		if p.replaced > maxReplacements {
			return fmt.Errorf("%d instances failed to become ready (more than the %d replacements allowed); see the warnings", p.replaced, maxReplacements)
		}
		need = failed
	}
}

func (p *provisioning) add(in state.Instance, reused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.members[in.ID] = &member{inst: in, version: in.Version, reused: reused}
	p.order = append(p.order, in.ID)
}

func (p *provisioning) expectAck(id string, within time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.members[id]; ok {
		m.ackBy, m.ackWithin = p.d.Now().Add(within), within
	}
}

func (p *provisioning) warn(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	p.d.Log.Warn(msg, "run", p.cfg.RunID)
	p.mu.Lock()
	p.res.Warnings = append(p.res.Warnings, msg)
	p.mu.Unlock()
}
