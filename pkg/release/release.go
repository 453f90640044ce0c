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

	"github.com/hangar-ci/hangar/pkg/ghapi"
	"github.com/hangar-ci/hangar/pkg/poolconfig"
	"github.com/hangar-ci/hangar/pkg/state"
)

// Store is the part of the state store release uses.
type Store interface {
	ByRun(ctx context.Context, run string) ([]state.Instance, error)
	Transition(ctx context.Context, c state.Change) (*state.Instance, error)
	Poll(ctx context.Context, ids []string, interval time.Duration, check func(map[string]*state.Instance) bool) error
}

// GitHub is the part of the GitHub API release uses.
type GitHub interface {
	RemoveToken(ctx context.Context) (ghapi.Token, error)
	Runners(ctx context.Context) ([]ghapi.Runner, error)
	DeleteRunner(ctx context.Context, id int64) error
}

// EC2 terminates instances.
type EC2 interface {
	TerminateInstances(ctx context.Context, params *ec2.TerminateInstancesInput, optFns ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
}

// Pools gives the pool document and the queue of a pool.
type Pools interface {
	Pool(ctx context.Context, name string) (*poolconfig.Document, error)
	Queue(ctx context.Context, name string) (Publisher, error)
}

// Publisher offers idle instances to a pool.
type Publisher interface {
	Publish(ctx context.Context, insts ...*state.Instance) error
}

// Deps are release's collaborators.
type Deps struct {
	Store  Store
	GitHub GitHub
	EC2    EC2
	Pools  Pools
	Log    *slog.Logger
	// Mask is called with every secret before it could reach a log (the action masks it).
	Mask func(secret string)
}

// Config is one release.
type Config struct {
	RunID string
	// DeregisterTimeout is how long agents have to deregister (default 2 min).
	DeregisterTimeout time.Duration
	// PollInterval caps the wait between reads of the items (default 200ms; see state.Store.Poll).
	PollInterval time.Duration
}

// Defaults.
const (
	DefaultDeregisterTimeout = 2 * time.Minute
	DefaultPollInterval      = 200 * time.Millisecond
)

// Validate checks the configuration before any request.
func (c *Config) Validate() error {
	if err := state.ValidateRunID(c.RunID); err != nil {
		return fmt.Errorf("run-id: %w", err)
	}
	if c.DeregisterTimeout < 0 || c.PollInterval < 0 {
		return fmt.Errorf("deregister-timeout %s, poll interval %s: want 0 (default) or more", c.DeregisterTimeout, c.PollInterval)
	}
	if c.DeregisterTimeout == 0 {
		c.DeregisterTimeout = DefaultDeregisterTimeout
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	return nil
}

// Outcome is what happened to one instance.
type Outcome struct {
	ID, Pool, Type, AZ, UsageClass string
	// Result: returned, terminated, already released.
	Result string
	// Reason says why, for terminated instances.
	Reason  string
	Seconds float64 // from the start of the release to the outcome
}

// Result is a release's report.
type Result struct {
	Instances      []Outcome
	RunnersDeleted int
	Warnings       []string
	Took           time.Duration
}

// Outcomes.
const (
	Returned   = "returned"
	Terminated = "terminated"
	Already    = "already released"
)

// Run releases every instance of cfg.RunID.
func Run(ctx context.Context, cfg Config, d Deps) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	insts, err := d.Store.ByRun(ctx, cfg.RunID)
	if err != nil {
		return nil, fmt.Errorf("find the instances of run %s: %w", cfg.RunID, err)
	}
	return GiveBack(ctx, cfg, d, insts), nil
}

// releasing is one instance on its way back.
type releasing struct {
	inst    state.Instance
	version int64 // the version release wrote
	done    bool
}

// GiveBack releases the given instances of cfg.RunID (their items as last read).
func GiveBack(ctx context.Context, cfg Config, d Deps, insts []state.Instance) *Result {
	r := &run{cfg: cfg, d: d, start: time.Now(), res: &Result{}}
	if d.Log == nil {
		r.d.Log = slog.Default()
	}
	r.giveBack(ctx, insts)
	r.cleanGitHub(ctx)
	slices.SortFunc(r.res.Instances, func(a, b Outcome) int { return strings.Compare(a.ID, b.ID) })
	r.res.Took = time.Since(r.start)
	return r.res
}

type run struct {
	cfg   Config
	d     Deps
	start time.Time
	mu    sync.Mutex
	res   *Result
}

func (r *run) warn(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	r.d.Log.Warn(msg, "run", r.cfg.RunID)
	r.mu.Lock()
	r.res.Warnings = append(r.res.Warnings, msg)
	r.mu.Unlock()
}

func (r *run) outcome(in state.Instance, result, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Instances = append(r.res.Instances, Outcome{ID: in.ID, Pool: in.Pool, Type: in.InstanceType, AZ: in.AZ,
		UsageClass: in.UsageClass, Result: result, Reason: reason, Seconds: time.Since(r.start).Seconds()})
}

func (r *run) giveBack(ctx context.Context, insts []state.Instance) {
	var back, booting []state.Instance
	for _, in := range insts {
		switch {
		case in.RunID != r.cfg.RunID:
			r.outcome(in, Already, "")
		case in.State == state.Running || in.State == state.Claimed:
			back = append(back, in)
		case in.State == state.Created:
			booting = append(booting, in)
		default:
			r.outcome(in, Already, "")
		}
	}
	r.terminate(ctx, "still booting for the run", booting...)
	if len(back) == 0 {
		return
	}
	var removeToken string
	if tok, err := r.d.GitHub.RemoveToken(ctx); err != nil {
		r.warn("no remove token (%v): agents forget their registration and release deletes the runners by API", err)
	} else {
		removeToken = tok.Value
		if r.d.Mask != nil {
			r.d.Mask(removeToken)
		}
	}

	waiting := make([]*releasing, 0, len(back))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, in := range back {
		wg.Go(func() {
			v, ok := r.toIdle(ctx, in, removeToken)
			if ok {
				mu.Lock()
				waiting = append(waiting, &releasing{inst: in, version: v})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	r.awaitDeregistered(ctx, waiting)
}

// toIdle moves one instance to idle, following it through a concurrent claimed → running.
func (r *run) toIdle(ctx context.Context, in state.Instance, removeToken string) (int64, bool) {
	doc, err := r.d.Pools.Pool(ctx, in.Pool)
	if err != nil {
		r.terminate(ctx, fmt.Sprintf("its pool document is unreadable (%v)", err), in)
		return 0, false
	}
	for range 3 {
		out, err := r.d.Store.Transition(ctx, state.Change{InstanceID: in.ID, Pool: in.Pool, From: in.State, To: state.Idle,
			Version: in.Version, RunID: r.cfg.RunID, RemoveToken: removeToken, Threshold: time.Now().Add(doc.Timeout(state.Idle)),
			Reason: "released by run " + r.cfg.RunID})
		if err == nil {
			return out.Version, true
		}
		var conflict *state.ConflictError
		if !errors.As(err, &conflict) || conflict.Current == nil {
			r.warn("release %s: %v", in.ID, err)
			r.outcome(in, Already, err.Error())
			return 0, false
		}
		cur := *conflict.Current
		if cur.RunID != r.cfg.RunID || (cur.State != state.Running && cur.State != state.Claimed) {
			r.outcome(cur, Already, "")
			return 0, false
		}
		in = cur // it moved within the run (claimed → running): try again from where it is
	}
	r.warn("release %s: the item kept changing; leaving it to its deadline", in.ID)
	return 0, false
}

// awaitDeregistered waits for each agent's DEREGISTERED, offering each instance to its pool as
// soon as it arrives; what has not arrived by the deadline is terminated.
func (r *run) awaitDeregistered(ctx context.Context, waiting []*releasing) {
	if len(waiting) == 0 {
		return
	}
	ids := make([]string, len(waiting))
	for i, w := range waiting {
		ids[i] = w.inst.ID
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.DeregisterTimeout)
	defer cancel()
	err := r.d.Store.Poll(wctx, ids, r.cfg.PollInterval, func(items map[string]*state.Instance) bool {
		ready := map[string][]*state.Instance{} // by pool
		left := 0
		for _, w := range waiting {
			if w.done {
				continue
			}
			it, ok := items[w.inst.ID]
			switch {
			case !ok || it.State == state.Terminated:
				w.done = true
				r.outcome(w.inst, Terminated, "terminated meanwhile")
			case it.SignalFor(state.SignalDeregistered, r.cfg.RunID, w.version) && it.State == state.Idle:
				w.done = true
				ready[it.Pool] = append(ready[it.Pool], it)
			case it.Version != w.version:
				w.done = true // someone else moved it on (refresh): not ours to offer
				r.outcome(*it, Already, "")
			case it.Signal == state.SignalSpotInterrupted || it.Signal == state.SignalFailed:
				w.done = true
				r.terminate(ctx, "its agent reported "+string(it.Signal), *it)
			default:
				left++
			}
		}
		for p, insts := range ready {
			r.publish(ctx, p, insts)
		}
		return left == 0
	})
	if err == nil {
		return
	}
	var stuck []state.Instance
	for _, w := range waiting {
		if !w.done {
			in := w.inst
			in.Version, in.State, in.RunID = w.version, state.Idle, ""
			stuck = append(stuck, in)
		}
	}
	r.terminate(ctx, fmt.Sprintf("its agent did not deregister within %s", r.cfg.DeregisterTimeout), stuck...)
}

func (r *run) publish(ctx context.Context, pool string, insts []*state.Instance) {
	q, err := r.d.Pools.Queue(ctx, pool)
	if err == nil {
		err = q.Publish(ctx, insts...)
	}
	for _, in := range insts {
		if err != nil {
			// Idle without an offer: refresh republishes or expires it.
			r.warn("offer %s to pool %s: %v", in.ID, pool, err)
		}
		r.outcome(*in, Returned, "")
	}
}

// terminate ends instances: their items first (so nothing claims them), then EC2, in one
// request (one by one if that fails: one instance already gone fails a whole request).
func (r *run) terminate(ctx context.Context, reason string, insts ...state.Instance) {
	if len(insts) == 0 {
		return
	}
	ids := make([]string, len(insts))
	for i, in := range insts {
		ids[i] = in.ID
		r.d.Log.Info("terminating", "instance", in.ID, "reason", reason)
		if in.State != state.Terminated {
			_, err := r.d.Store.Transition(ctx, state.Change{InstanceID: in.ID, Pool: in.Pool, From: in.State, To: state.Terminated,
				Version: in.Version, RunID: in.RunID, Reason: reason})
			if err != nil && !errors.Is(err, state.ErrConflict) {
				r.warn("mark %s terminated: %v", in.ID, err)
			}
		}
	}
	if _, err := r.d.EC2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids}); err != nil && len(ids) > 1 {
		for _, id := range ids {
			if _, err := r.d.EC2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
				r.warn("terminate %s: %v (its item is terminated, so its agent ends it; refresh retries)", id, err)
			}
		}
	} else if err != nil {
		r.warn("terminate %s: %v (its item is terminated, so its agent ends it; refresh retries)", ids[0], err)
	}
	for _, in := range insts {
		r.outcome(in, Terminated, reason)
	}
}

// cleanGitHub deletes every runner still carrying the run's label.
func (r *run) cleanGitHub(ctx context.Context) {
	runners, err := r.d.GitHub.Runners(ctx)
	if err != nil {
		r.warn("check GitHub for runners of run %s: %v", r.cfg.RunID, err)
		return
	}
	for _, x := range runners {
		if !slices.Contains(x.Labels, r.cfg.RunID) {
			continue
		}
		if err := r.d.GitHub.DeleteRunner(ctx, x.ID); err != nil {
			r.warn("delete leftover runner %s: %v", x.Name, err)
			continue
		}
		r.d.Log.Info("deleted leftover runner", "runner", x.Name)
		r.mu.Lock()
		r.res.RunnersDeleted++
		r.mu.Unlock()
	}
}
