// Package dispatch serves label-routed jobs (docs/labels.md, docs/design.md §11): it reads the
// jobs queue and the returns queue in batches and, for each job the webhook function passed on,
// claims an idle instance of the job's pool through the pool's claim path (offers.Selector, the
// pool's reuse scope against the job's repository) or creates one (one CreateFleet per pool and
// batch), makes a just-in-time runner for it with the GitHub App, seals the runner's
// configuration for that instance alone and hands it over in the claim. It moves the instance to
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

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/platform/metrics"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
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
}

// Validate checks the configuration; it changes nothing.
func (c Config) Validate() error {
	var errs []error
	if err := pooldoc.ValidateStack(c.Stack); err != nil {
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
	return errors.Join(errs...)
}

// Store is the part of the state store the dispatcher uses (state.Store).
type Store interface {
	pool.Store
	pool.Creator
	TransitionAll(ctx context.Context, changes []state.Change, befores []state.Instance) []state.Written
	Get(ctx context.Context, id string) (*state.Instance, error)
	GetMany(ctx context.Context, ids []string) (map[string]*state.Instance, error)
	ByRun(ctx context.Context, run string) ([]state.Instance, error)
	Events(ctx context.Context, action string, jobs []int64) (map[int64]string, error)
}

// Pools reads the stack's pool documents (pooldoc.Cache).
type Pools interface {
	LoadStack(ctx context.Context) (*pooldoc.Stack, error)
}

// Offers finds each pool's queue and offers instances on it (offers.Directory).
type Offers interface {
	Queue(ctx context.Context, pool string) (*offers.Queue, error)
	Publish(ctx context.Context, insts ...*state.Instance) error
}

// Launcher creates instances and fills in the types of pools that choose them by size
// (fleet.Launcher).
type Launcher interface {
	Launch(ctx context.Context, req fleet.Request) ([]fleet.Instance, error)
	Resolve(ctx context.Context, doc *pooldoc.Document) error
}

// EC2 starts claimed stopped instances, untags recorded ones and terminates retired ones.
type EC2 interface {
	fleet.Tagger
	pool.Starter
	TerminateInstances(ctx context.Context, params *ec2.TerminateInstancesInput, optFns ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
}

// EC2Launcher is every EC2 call the dispatcher makes, its launcher's included.
type EC2Launcher interface {
	EC2
	fleet.EC2
}

// Runners is what the dispatcher does on GitHub in one scope (ghapi.Client).
type Runners interface {
	GenerateJITConfig(ctx context.Context, r ghapi.JITRequest) (ghapi.JIT, error)
	RunnerGroupID(ctx context.Context, name string) (int64, error)
	Runners(ctx context.Context) ([]ghapi.Runner, error)
	RunnerByName(ctx context.Context, name string) (ghapi.Runner, error)
	DeleteRunner(ctx context.Context, id int64) error
}

// GitHub gives a client for a scope, acting as one installation of the App (ghapp.App).
type GitHub func(installation int64, scope ghapi.Scope) (Runners, error)

// SQS is the queue calls the dispatcher makes: its delayed checks.
type SQS interface {
	SendMessageBatch(ctx context.Context, params *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// Deps are the dispatcher's collaborators.
type Deps struct {
	Pools Pools
	// Prices prices the instances launched, recorded in their items (nil: price unknown).
	Prices   pool.Pricer
	Store    Store
	Offers   Offers
	Launcher Launcher
	EC2      EC2
	GitHub   GitHub
	SQS      SQS
	// Bells makes the doorbells of the instances created, hands each instance placed its
	// just-in-time runner configuration through its doorbell, and rings those given back.
	Bells   *doorbell.Bells
	Log     *slog.Logger
	Metrics *metrics.Writer
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// validate refuses missing collaborators (a wiring mistake) before anything happens.
func (d *Deps) validate() error {
	var missing []string
	for name, set := range map[string]bool{"Pools": d.Pools != nil, "Store": d.Store != nil, "Offers": d.Offers != nil,
		"Launcher": d.Launcher != nil, "EC2": d.EC2 != nil, "GitHub": d.GitHub != nil, "SQS": d.SQS != nil, "Bells": d.Bells.On()} {
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
	cfg     Config
	d       Deps
	names   state.RunnerNames
	retire  *pool.Retirer
	record  *pool.Recorder
	returns *pool.Returner

	mu       sync.Mutex
	resolved map[*pooldoc.Document]bool // pool documents whose types are resolved
	// groupsMu is held while a runner group's id is looked up, so that it is asked once.
	groupsMu sync.Mutex
	groups   map[string]int64 // organisation/group name → runner group id
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
	retire := &pool.Retirer{Store: d.Store, EC2: d.EC2, Bells: d.Bells, Log: d.Log}
	return &Dispatcher{cfg: cfg, d: d, names: state.RunnerNamesOf(cfg.Stack), retire: retire,
		record:  &pool.Recorder{Store: d.Store, EC2: d.EC2, Prices: d.Prices, Bells: d.Bells, Log: d.Log},
		returns: &pool.Returner{Store: d.Store, Offers: d.Offers, Retirer: retire, Bells: d.Bells, Log: d.Log},
		groups:  map[string]int64{}, resolved: map[*pooldoc.Document]bool{}}, nil
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
		mu     sync.Mutex
		failed []string
		queued []queuedJob
		wg     sync.WaitGroup
	)
	fail := func(id string) {
		mu.Lock()
		failed = append(failed, id)
		mu.Unlock()
	}
	for _, m := range batch {
		if m.Source == FromReturns {
			wg.Go(func() {
				if err := x.returned(ctx, m); err != nil {
					x.d.Log.Error("dispatch: an agent's return", "message", m.ID, "error", err)
					fail(m.ID)
				}
			})
			continue
		}
		msg, err := jobs.Parse(m.Body)
		if err != nil {
			x.d.Log.Error("dispatch: a jobs message that can never be served; dropped", "message", m.ID, "error", err)
			continue
		}
		if msg.Kind == jobs.KindQueued {
			queued = append(queued, queuedJob{msg: m, job: msg.Job})
			continue
		}
		wg.Go(func() {
			if err := x.event(ctx, msg); err != nil {
				x.d.Log.Error("dispatch: "+string(msg.Kind), "message", m.ID, "job", msg.Job.ID, "error", err)
				fail(m.ID)
			}
		})
	}
	if len(queued) > 0 {
		for _, id := range x.place(ctx, queued) {
			fail(id)
		}
	}
	wg.Wait()
	return failed
}
