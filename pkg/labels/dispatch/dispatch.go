// Package dispatch is the worker of the labels door (docs/labels.md, docs/design.md §11): it reads
// the jobs queue and the returns queue in batches and, for each job the webhook function passed
// on, asks the pool for an instance (pool.Acquire: one group per repository, whose reuse scope
// decides which warm instances fit; one CreateFleet per pool and batch for the rest), making a
// just-in-time runner for each instance with the GitHub App as it is claimed or recorded, its
// configuration handed to that instance alone through its doorbell. It moves the instance to
// running when the runner takes a job, gives it back when the job completes or the agent says it
// is done (whichever comes first: one conditional write wins), offers it again once its agent has
// wiped it, and removes a runner that got no job within its bound. It knows nothing of Lambda:
// cmd/webhook feeds it SQS batches.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/platform/metrics"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// Defaults of a Config.
const (
	// DefaultUnregisterEvery is how long a runner GitHub would not delete (busy) waits before the
	// next try.
	DefaultUnregisterEvery = time.Minute
	// DefaultUnregisterRounds bounds those tries: GitHub fails a job whose runner is gone within
	// minutes, after which the runner can be deleted.
	DefaultUnregisterRounds = 30
	// DefaultBootCheckEvery is how often a check finds an instance still booting and looks again.
	DefaultBootCheckEvery = time.Minute
	// DefaultCreateWait bounds the capacity retries of one batch's CreateFleet.
	DefaultCreateWait = 30 * time.Second
	// maxDelay is SQS's longest message delay.
	maxDelay = 15 * time.Minute
)

// Config is the dispatcher's configuration.
type Config struct {
	// Stack is the stack's name: runner names start hangar-<stack>- (state.RunnerNamesOf).
	Stack string
	// JobsQueueURL is the jobs queue, where the dispatcher sends its own checks.
	JobsQueueURL string
	// CheckAfter is how long a job's runner may wait for a job before it is removed (0: the
	// pool's claimed timeout; an instance created for the job gets its created timeout on top).
	CheckAfter time.Duration
	// UnregisterEvery and UnregisterRounds pace the deletion of a runner GitHub says is busy.
	UnregisterEvery  time.Duration
	UnregisterRounds int
	// BootCheckEvery is how often the check of a job whose instance still boots is repeated.
	BootCheckEvery time.Duration
	// CreateWait bounds the capacity retries of one CreateFleet.
	CreateWait time.Duration
	// SweepEvery is the period of the stack's sweep schedule: a sweep message within half of it
	// after the last sweep is dropped.
	SweepEvery time.Duration
	// MissingAfter is how long a queued job may go unrecorded before the sweep admits it.
	MissingAfter time.Duration
	// SweepRequests bounds one sweep's GitHub requests.
	SweepRequests int
}

// ApplyDefaults fills the fields left zero.
func (c *Config) ApplyDefaults() {
	if c.UnregisterEvery == 0 {
		c.UnregisterEvery = DefaultUnregisterEvery
	}
	if c.UnregisterRounds == 0 {
		c.UnregisterRounds = DefaultUnregisterRounds
	}
	if c.BootCheckEvery == 0 {
		c.BootCheckEvery = DefaultBootCheckEvery
		if c.CheckAfter > 0 {
			c.BootCheckEvery = min(c.BootCheckEvery, c.CheckAfter)
		}
	}
	if c.CreateWait == 0 {
		c.CreateWait = DefaultCreateWait
	}
	if c.SweepEvery == 0 {
		c.SweepEvery = DefaultSweepEvery
	}
	if c.MissingAfter == 0 {
		c.MissingAfter = DefaultMissingAfter
	}
	if c.SweepRequests == 0 {
		c.SweepRequests = DefaultSweepRequests
	}
}

// Validate checks the configuration; it changes nothing.
func (c Config) Validate() error {
	var errs []error
	if err := names.ValidateStack(c.Stack); err != nil {
		errs = append(errs, fmt.Errorf("stack: %w", err))
	}
	if !strings.HasPrefix(c.JobsQueueURL, "http") {
		errs = append(errs, fmt.Errorf("jobs queue URL %q: want the jobs queue's URL", c.JobsQueueURL))
	}
	for name, d := range map[string]time.Duration{"check after": c.CheckAfter, "unregister every": c.UnregisterEvery,
		"boot check every": c.BootCheckEvery} {
		if d < 0 || d > maxDelay {
			errs = append(errs, fmt.Errorf("%s %s: want 0 to %s (SQS's longest delay)", name, d, maxDelay))
		}
	}
	if c.UnregisterRounds < 0 {
		errs = append(errs, fmt.Errorf("unregister rounds %d: want 0 or more", c.UnregisterRounds))
	}
	if c.CreateWait < 0 {
		errs = append(errs, fmt.Errorf("create wait %s: want 0 or more", c.CreateWait))
	}
	if c.SweepEvery < 0 || c.MissingAfter < 0 {
		errs = append(errs, fmt.Errorf("sweep every %s, missing after %s: want 0 (the default) or more", c.SweepEvery, c.MissingAfter))
	}
	if c.SweepRequests < 0 {
		errs = append(errs, fmt.Errorf("sweep requests %d: want 0 (the default, %d) or more", c.SweepRequests, DefaultSweepRequests))
	}
	return errors.Join(errs...)
}

// Events reads which jobs' webhook events are recorded, and records the dispatcher's own (a job
// placed again), once each (state.Store).
type Events interface {
	Events(ctx context.Context, action string, jobs []int64) (map[int64]string, error)
	RecordEvent(ctx context.Context, job int64, action, body string) (bool, error)
	ForgetEvent(ctx context.Context, job int64, action string) error
}

// Waiting keeps the jobs waiting for room under a pool's or the stack's maxInstances
// (state.Store).
type Waiting interface {
	AddWaiter(ctx context.Context, w state.Waiter) error
	Waiters(ctx context.Context, pool string, limit int) ([]state.Waiter, error)
	TakeWaiter(ctx context.Context, pool, key string, round int) (state.Waiter, bool, error)
	NextRound(ctx context.Context, w state.Waiter, from int) (bool, error)
	IsWaiting(ctx context.Context, pool, key string) (bool, error)
}

// Pools reads the stack's pool documents (pooldoc.Cache).
type Pools interface {
	LoadStack(ctx context.Context) (*pooldoc.Stack, error)
}

// Runners is what the dispatcher does on GitHub in one scope (ghclient.Client).
type Runners interface {
	// CanMakeRunners says why the installation cannot make and delete runners in the scope (its
	// token refused, or without the permission): nil when it can. It asks GitHub nothing beyond
	// the installation token the other calls need anyway.
	CanMakeRunners(ctx context.Context) error
	GenerateJITConfig(ctx context.Context, r ghapi.JITRequest) (ghapi.JIT, error)
	// RepositoryGroup returns the id of the organisation runner group name, open to repository
	// repoID alone, made when missing (ghapi.RepositoryGroupID in a repository's scope).
	RepositoryGroup(ctx context.Context, name string, repoID int64) (int64, error)
	Runners(ctx context.Context) ([]ghapi.Runner, error)
	RunnerByName(ctx context.Context, name string) (ghapi.Runner, error)
	DeleteRunner(ctx context.Context, id int64) error
	// Workflows are the installation's reads the sweep makes (any scope serves them).
	Workflows
}

// GitHub gives a client for a scope, acting as one installation of the App (ghapp.App).
type GitHub func(installation int64, scope ghapi.Scope) (Runners, error)

// Deps are the dispatcher's collaborators.
type Deps struct {
	Pools Pools
	// Pool claims, creates, hands over and gives back; its Store is where the dispatcher reads
	// and moves instances. It must have doorbells: without them no runner configuration reaches
	// an instance.
	Pool    *pool.Pool
	Events  Events
	Waiting Waiting
	GitHub  GitHub
	// App is the App itself, for the sweep; Cursors keep where the sweeps got to.
	App     AppHooks
	Cursors Cursors
	SQS     awsapi.SQS
	Log     *slog.Logger
	Metrics *metrics.Writer
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// validate refuses missing collaborators (a wiring mistake) before anything happens.
func (d *Deps) validate() error {
	if err := d.Pool.Validate("Queues", "Launcher", "Bells"); err != nil {
		return fmt.Errorf("dispatch: %w", err)
	}
	var missing []string
	for name, set := range map[string]bool{"Pools": d.Pools != nil, "Events": d.Events != nil, "Waiting": d.Waiting != nil, "GitHub": d.GitHub != nil,
		"App": d.App != nil, "Cursors": d.Cursors != nil, "SQS": d.SQS != nil} {
		if !set {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("dispatch: Deps.%s not set", strings.Join(missing, ", Deps."))
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	return nil
}

// Dispatcher serves one stack's label-routed jobs. Build it once (the Lambda does, before its
// first batch); it is safe for concurrent use.
type Dispatcher struct {
	cfg   Config
	d     Deps
	names state.RunnerNames

	// groupsMu is held while a repository's runner group is looked up, so that it is asked once.
	groupsMu sync.Mutex
	groups   map[string]int64 // organisation/group name → runner group id

	swept sweepState
}

// New returns a dispatcher; it makes no request.
func New(cfg Config, d Deps) (*Dispatcher, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("dispatch: %w", err)
	}
	if err := d.validate(); err != nil {
		return nil, err
	}
	return &Dispatcher{cfg: cfg, d: d, names: state.RunnerNamesOf(cfg.Stack), groups: map[string]int64{}}, nil
}

// Source says which queue a message came from.
type Source int

// The dispatcher's two queues.
const (
	// FromJobs: the jobs queue (the webhook function's messages, and the dispatcher's own).
	FromJobs Source = iota
	// FromReturns: the returns queue (the agents').
	FromReturns
)

// Message is one SQS message of a batch.
type Message struct {
	ID     string
	Body   string
	Source Source
	// Receives is how many times SQS has delivered it (ApproximateReceiveCount): more than one
	// means an earlier attempt failed or died, and may have done part of the work.
	Receives int
}

// Handle serves one batch and returns the ids of the messages to be delivered again (SQS's
// partial batch response); every other message is done with. A message that can never be served
// (malformed) is logged and done with: retrying it would change nothing.
func (x *Dispatcher) Handle(ctx context.Context, batch []Message) []string {
	var (
		mu      sync.Mutex
		failed  []string
		arrived []queuedJob // the batch's queued jobs
		queued  []queuedJob // those to place
		backs   []back
		wg      sync.WaitGroup
		returns sync.WaitGroup
	)
	fail := func(id string) {
		mu.Lock()
		failed = append(failed, id)
		mu.Unlock()
	}
	for _, m := range batch {
		if m.Source == FromReturns {
			returns.Go(func() {
				b, err := x.returned(ctx, m)
				if err != nil {
					x.d.Log.Error("an agent's return", "message", m.ID, "error", err)
					fail(m.ID)
				}
				if b != nil {
					mu.Lock()
					backs = append(backs, *b)
					mu.Unlock()
				}
			})
			continue
		}
		msg, err := jobs.Parse(m.Body)
		if err != nil {
			x.d.Log.Error("a jobs message that can never be served; dropped", "message", m.ID, "error", err)
			continue
		}
		if msg.Kind == jobs.KindQueued {
			arrived = append(arrived, queuedJob{msg: m, job: msg.Job, round: msg.Round, since: msg.WaitingSince, spare: msg.Spare})
			continue
		}
		wg.Go(func() {
			if err := x.event(ctx, msg); err != nil {
				x.d.Log.Error(""+string(msg.Kind), "message", m.ID, "job", msg.Job.ID, "error", err)
				fail(m.ID)
			}
		})
	}
	for _, q := range x.waitBehind(ctx, arrived) {
		ok, err := x.unwait(ctx, q)
		switch {
		case err != nil:
			x.d.Log.Error("take a job off its pool's waiters", "message", q.msg.ID, "job", q.job.ID, "error", err)
			fail(q.msg.ID)
		case ok:
			queued = append(queued, q)
		}
	}
	// The batch's returns are taken back together: the instances that came back to a pool go to
	// its waiting jobs in one placement.
	wg.Go(func() {
		returns.Wait()
		for _, id := range x.comeBack(ctx, backs) {
			fail(id)
		}
	})
	if len(queued) > 0 {
		failedIDs := x.place(ctx, queued)
		x.putBack(ctx, queued, failedIDs)
		for _, id := range failedIDs {
			fail(id)
		}
	}
	wg.Wait()
	return failed
}
