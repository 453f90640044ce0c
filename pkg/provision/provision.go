package provision

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/hangar-ci/hangar/pkg/fleet"
	"github.com/hangar-ci/hangar/pkg/ghapi"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/poolconfig"
	"github.com/hangar-ci/hangar/pkg/release"
	"github.com/hangar-ci/hangar/pkg/state"
)

// Store is the part of the state store provision uses.
type Store interface {
	Create(ctx context.Context, insts []*state.Instance) error
	Transition(ctx context.Context, c state.Change) (*state.Instance, error)
	Poll(ctx context.Context, ids []string, interval time.Duration, check func(map[string]*state.Instance) bool) error
	ByRun(ctx context.Context, run string) ([]state.Instance, error)
	GetMany(ctx context.Context, ids []string) (map[string]*state.Instance, error)
}

// Claimer claims idle instances from the pool (pool.Selector).
type Claimer interface {
	Claim(ctx context.Context, req pool.Request) (pool.Result, error)
}

// Publisher offers instances back to the pool (pool.Queue).
type Publisher interface {
	Publish(ctx context.Context, insts ...*state.Instance) error
}

// Launcher creates instances (fleet.Launcher).
type Launcher interface {
	Launch(ctx context.Context, req fleet.Request) ([]fleet.Instance, error)
	Describe(ctx context.Context, types []string) (map[string]fleet.Spec, error)
}

// EC2 starts, untags and terminates instances.
type EC2 interface {
	fleet.Tagger
	StartInstances(ctx context.Context, params *ec2.StartInstancesInput, optFns ...func(*ec2.Options)) (*ec2.StartInstancesOutput, error)
	TerminateInstances(ctx context.Context, params *ec2.TerminateInstancesInput, optFns ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
}

// GitHub is the part of the GitHub API provision uses.
type GitHub interface {
	RegistrationToken(ctx context.Context) (ghapi.Token, error)
	Runners(ctx context.Context) ([]ghapi.Runner, error)
	DeleteRunner(ctx context.Context, id int64) error
}

// Deps are provision's collaborators.
type Deps struct {
	Pool     *poolconfig.Document
	Store    Store
	Claimer  Claimer
	Queue    Publisher
	Launcher Launcher
	EC2      EC2
	GitHub   GitHub
	// Release gives instances back (a failed provision's, or an earlier attempt's).
	Release release.Deps
	Log     *slog.Logger
	// Mask is called with every secret before it could reach a log.
	Mask func(secret string)
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
}

// member is one instance provision is waiting for.
type member struct {
	inst    state.Instance
	version int64 // the version provision wrote: signals must be about it or later
	reused  bool
	ready   bool
	readyAt time.Duration
}

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
}

// Run provisions cfg.Count instances for cfg.RunID.
func Run(ctx context.Context, cfg Config, d Deps) (*Result, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	p := &provisioning{cfg: cfg, d: d, start: time.Now(), members: map[string]*member{}, res: &Result{RunnerLabel: cfg.RunID}}
	if err := p.check(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithDeadline(ctx, p.start.Add(cfg.RegistrationTimeout))
	defer cancel()

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
	scope, _ := ghapi.ParseScope(cfg.Repository, cfg.Scope)
	p.assign = state.Assignment{RunID: cfg.RunID, RunAttempt: cfg.RunAttempt, Repo: cfg.Repository,
		RunnerURL: scope.RunnerURL(cfg.ServerURL), RegToken: tok.Value, RegTokenExpiresAt: tok.ExpiresAt, Labels: cfg.Labels}

	if err := p.provision(ctx); err != nil {
		p.rollback(err)
		return nil, err
	}
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
	return p.res, nil
}

// check refuses, before anything changes, a request the pool cannot serve.
func (p *provisioning) check(ctx context.Context) error {
	doc := p.d.Pool
	if doc == nil || doc.Name != p.cfg.Pool {
		return fmt.Errorf("pool: %q: no such pool document", p.cfg.Pool)
	}
	if !doc.RepoAllowed(p.cfg.Repository) {
		return fmt.Errorf("GITHUB_REPOSITORY: %s may not use pool %s (allowed: %s)", p.cfg.Repository, doc.Name, strings.Join(doc.AllowedRepositories, ", "))
	}
	p.runtime = doc.Timeout(state.Running)
	if p.cfg.MaxRuntime > 0 {
		if p.cfg.MaxRuntime > p.runtime {
			return fmt.Errorf("max-runtime: %s: the pool allows at most %s", p.cfg.MaxRuntime, p.runtime)
		}
		p.runtime = p.cfg.MaxRuntime
	}
	for _, t := range doc.InstanceTypes {
		if matchesAny(p.cfg.InstanceTypes, t) {
			p.types = append(p.types, t)
		}
	}
	if len(p.types) > 0 && (p.cfg.MinVCPU > 0 || p.cfg.MinMemoryMiB > 0) {
		specs, err := p.d.Launcher.Describe(ctx, p.types)
		if err != nil {
			return err
		}
		p.types = slices.DeleteFunc(p.types, func(t string) bool {
			s, ok := specs[t]
			return !ok || s.VCPU < p.cfg.MinVCPU || s.MemoryMiB < p.cfg.MinMemoryMiB
		})
	}
	if len(p.types) == 0 {
		return fmt.Errorf("allowed-instance-types, min-vcpu, min-memory-mib: no instance type of pool %s fits %v with at least %d vCPU and %d MiB (the pool has %s)",
			doc.Name, p.cfg.InstanceTypes, p.cfg.MinVCPU, p.cfg.MinMemoryMiB, strings.Join(doc.InstanceTypes, ", "))
	}
	return nil
}

func matchesAny(patterns []string, t string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if ok, _ := path.Match(p, t); ok {
			return true
		}
	}
	return false
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

// acquire claims up to n instances from the pool and creates the rest.
func (p *provisioning) acquire(ctx context.Context, n int) error {
	doc := p.d.Pool
	claimStart := time.Now()
	usage := ""
	switch p.cfg.UsageClass {
	case poolconfig.MarketSpot:
		usage = state.UsageSpot
	case poolconfig.MarketOnDemand:
		usage = state.UsageOnDemand
	}
	res, err := p.d.Claimer.Claim(ctx, pool.Request{Count: n, UsageClass: usage, InstanceTypes: p.types,
		MinVCPU: p.cfg.MinVCPU, MinMemoryMiB: p.cfg.MinMemoryMiB, Assign: p.assign,
		ClaimDeadline: time.Now().Add(doc.Timeout(state.Claimed)), Exclude: p.failedIDs()})
	for _, in := range res.Instances {
		p.add(*in, true)
	}
	if err != nil {
		p.warn("claim from pool %s: %v (creating instead)", doc.Name, err)
	}
	if len(res.Stopped) > 0 {
		if _, err := p.d.EC2.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: res.Stopped}); err != nil {
			p.warn("start stopped instances %v: %v", res.Stopped, err)
		}
	}
	p.res.Timing.Claim += time.Since(claimStart)
	rest := n - len(res.Instances)
	if rest == 0 {
		return nil
	}
	createStart := time.Now()
	defer func() { p.res.Timing.Create += time.Since(createStart) }()
	deadline, _ := ctx.Deadline()
	_, err = p.d.Launcher.Launch(ctx, fleet.Request{
		Pool: doc, Count: rest, Market: p.cfg.UsageClass, Types: p.types, Tags: p.cfg.Tags,
		Reserved: map[string]string{"hangar:stack": p.cfg.Stack, "hangar:pool": doc.Name, "hangar:run-id": p.cfg.RunID,
			"hangar:repository": p.cfg.Repository, "hangar:managed-by": "hangar"},
		Deadline: deadline,
		Token:    fmt.Sprintf("hangar-%s-%d-%s-%d", p.cfg.RunID, p.cfg.RunAttempt, doc.Name, p.replaced),
		OnLaunch: p.record,
	})
	return err
}

// record writes the items of freshly launched instances, before anything else, so that none is
// left without one.
func (p *provisioning) record(ctx context.Context, launched []fleet.Instance) error {
	doc := p.d.Pool
	items := make([]*state.Instance, len(launched))
	now := time.Now()
	for i, l := range launched {
		items[i] = &state.Instance{ID: l.ID, Pool: doc.Name, Threshold: now.Add(doc.Timeout(state.Created)), LaunchedAt: now,
			Spec:       state.Spec{InstanceType: l.Type, UsageClass: l.UsageClass, AZ: l.AZ, VCPU: l.VCPU, MemoryMiB: l.MemoryMiB, SpecHash: doc.SpecHash},
			Assignment: p.assign, StateReason: "created for run " + p.cfg.RunID}
	}
	// A context of its own: the items must be written even if the provision is being cancelled.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := p.d.Store.Create(wctx, items); err != nil {
		return err
	}
	ids := make([]string, len(items))
	for i, in := range items {
		ids[i] = in.ID
	}
	if err := fleet.MarkRecorded(wctx, p.d.EC2, ids); err != nil {
		p.warn("%v (refresh removes the tag once it sees the items)", err) // harmless: refresh finds the items
	}
	for _, in := range items {
		p.add(*in, false)
	}
	p.d.Log.Info("created instances", "count", len(items), "pool", doc.Name)
	return nil
}

func (p *provisioning) add(in state.Instance, reused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.members[in.ID] = &member{inst: in, version: in.Version, reused: reused}
	p.order = append(p.order, in.ID)
}

func (p *provisioning) warn(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	p.d.Log.Warn(msg, "run", p.cfg.RunID)
	p.mu.Lock()
	p.res.Warnings = append(p.res.Warnings, msg)
	p.mu.Unlock()
}

func (p *provisioning) failedIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.failed)
}

// pending returns the members not yet ready.
func (p *provisioning) pending() []*member {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*member
	for _, id := range p.order {
		if m := p.members[id]; !m.ready {
			out = append(out, m)
		}
	}
	return out
}

// wait waits until every pending instance is ready or has failed; it returns how many failed
// (they are given back or terminated, and dropped).
func (p *provisioning) wait(ctx context.Context) (int, error) {
	pending := p.pending()
	if len(pending) == 0 {
		return 0, nil
	}
	ids := make([]string, len(pending))
	for i, m := range pending {
		ids[i] = m.inst.ID
	}
	var failed atomic.Int64
	open := map[string]*member{}
	for _, m := range pending {
		open[m.inst.ID] = m
	}
	err := p.d.Store.Poll(ctx, ids, p.cfg.PollInterval, func(items map[string]*state.Instance) bool {
		var wg sync.WaitGroup
		for id, m := range open {
			it, ok := items[id]
			if !ok {
				continue // not readable this time; the item exists (provision wrote it)
			}
			switch {
			case it.SignalFor(state.SignalRegistered, p.cfg.RunID, m.version):
				delete(open, id)
				wg.Go(func() {
					if err := p.toRunning(ctx, m, it); err != nil {
						p.warn("%s registered but could not be marked running: %v", id, err)
						failed.Add(1)
						p.drop(ctx, it, err.Error())
					}
				})
			case it.SignalFor(state.SignalRegisterFailed, p.cfg.RunID, m.version):
				delete(open, id)
				failed.Add(1)
				p.warn("%s could not register its runner: %s", id, lastLine(it.SignalLog))
				wg.Go(func() { p.drop(ctx, it, "runner registration failed") })
			case it.Signal == state.SignalFailed || it.Signal == state.SignalSpotInterrupted || it.State == state.Terminated:
				delete(open, id)
				failed.Add(1)
				reason := "its agent reported " + string(it.Signal)
				if it.State == state.Terminated {
					reason = "terminated meanwhile: " + it.StateReason
				}
				p.warn("%s failed: %s %s", id, reason, lastLine(it.SignalLog))
				wg.Go(func() { p.drop(ctx, it, reason) })
			}
		}
		wg.Wait()
		return len(open) == 0
	})
	if err != nil {
		return int(failed.Load()), fmt.Errorf("%d of %d runners not registered within registration-timeout %s: %w",
			len(open), p.cfg.Count, p.cfg.RegistrationTimeout, err)
	}
	return int(failed.Load()), nil
}

// toRunning moves a registered instance to running.
func (p *provisioning) toRunning(ctx context.Context, m *member, it *state.Instance) error {
	out, err := p.d.Store.Transition(ctx, state.Change{InstanceID: it.ID, Pool: it.Pool, From: it.State, To: state.Running,
		Version: it.Version, RunID: p.cfg.RunID, Threshold: time.Now().Add(p.runtime), Reason: "runner registered for run " + p.cfg.RunID})
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m.inst, m.version, m.ready, m.readyAt = *out, out.Version, true, time.Since(p.start)
	return nil
}

// drop gives a failed instance back (healthy and claimed: to the pool) or terminates it, and
// forgets it.
func (p *provisioning) drop(ctx context.Context, it *state.Instance, reason string) {
	p.mu.Lock()
	p.failed = append(p.failed, it.ID)
	delete(p.members, it.ID)
	p.order = slices.DeleteFunc(p.order, func(id string) bool { return id == it.ID })
	p.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	if it.State == state.Claimed && it.Signal == state.SignalRegisterFailed {
		out, err := p.d.Store.Transition(ctx, state.Change{InstanceID: it.ID, Pool: it.Pool, From: state.Claimed, To: state.Idle,
			Version: it.Version, RunID: p.cfg.RunID, Threshold: time.Now().Add(p.d.Pool.Timeout(state.Idle)), Reason: reason})
		if err == nil {
			if err := p.d.Queue.Publish(ctx, out); err != nil {
				p.warn("offer %s back to the pool: %v", it.ID, err)
			}
			return
		}
		p.warn("give %s back: %v; terminating it", it.ID, err)
	}
	if it.State != state.Terminated {
		if _, err := p.d.Store.Transition(ctx, state.Change{InstanceID: it.ID, Pool: it.Pool, From: it.State, To: state.Terminated,
			Version: it.Version, Reason: reason}); err != nil && !errors.Is(err, state.ErrConflict) {
			p.warn("mark %s terminated: %v", it.ID, err)
		}
	}
	if _, err := p.d.EC2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{it.ID}}); err != nil {
		p.warn("terminate %s: %v (refresh will retry)", it.ID, err)
	}
}

// rollback gives back or terminates everything this provision took.
func (p *provisioning) rollback(cause error) {
	p.mu.Lock()
	ids := slices.Clone(p.order)
	p.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	p.d.Log.Error("provision failed; giving back what it took", "error", cause, "instances", len(ids))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	items, err := p.d.Store.GetMany(ctx, ids)
	if err != nil {
		p.d.Log.Error("rollback: read the items; refresh will expire them", "error", err)
		return
	}
	var insts []state.Instance
	for _, id := range ids {
		if it, ok := items[id]; ok {
			insts = append(insts, *it)
		}
	}
	res := release.GiveBack(ctx, release.Config{RunID: p.cfg.RunID, DeregisterTimeout: time.Minute, PollInterval: p.cfg.PollInterval}, p.d.Release, insts)
	for _, w := range res.Warnings {
		p.d.Log.Warn("rollback: " + w)
	}
}

// replaceEarlierAttempt gives back the instances an earlier attempt of the run left, so that no
// stale runner holds the label; this attempt gets fresh ones.
func (p *provisioning) replaceEarlierAttempt(ctx context.Context) {
	left, err := p.d.Store.ByRun(ctx, p.cfg.RunID)
	if err != nil {
		p.warn("look for instances of earlier attempts: %v", err)
		return
	}
	var earlier []state.Instance
	for _, in := range left {
		if in.RunAttempt < p.cfg.RunAttempt {
			earlier = append(earlier, in)
		}
	}
	if len(earlier) == 0 {
		return
	}
	p.d.Log.Info("giving back the instances of earlier attempts", "count", len(earlier))
	res := release.GiveBack(ctx, release.Config{RunID: p.cfg.RunID, PollInterval: p.cfg.PollInterval}, p.d.Release, earlier)
	for _, w := range res.Warnings {
		p.warn("giving back an earlier attempt's instances: %s", w)
	}
}

// removeOfflineRunners deletes offline runners Hangar registered earlier for this scope whose
// instance no longer serves their run (a crashed agent, a vanished instance).
func (p *provisioning) removeOfflineRunners(ctx context.Context) {
	runners, err := p.d.GitHub.Runners(ctx)
	if err != nil {
		p.warn("list runners for housekeeping: %v", err)
		return
	}
	type stale struct {
		r       ghapi.Runner
		id, run string
	}
	var candidates []stale
	var ids []string
	for _, r := range runners {
		id, run, ok := parseRunnerName(r.Name)
		if !ok || r.Status != "offline" || r.Busy || run == p.cfg.RunID {
			continue
		}
		candidates = append(candidates, stale{r, id, run})
		ids = append(ids, id)
	}
	if len(candidates) == 0 {
		return
	}
	items, err := p.d.Store.GetMany(ctx, ids)
	if err != nil {
		p.warn("housekeeping: read instances: %v", err)
		return
	}
	for _, c := range candidates {
		if it, ok := items[c.id]; ok && it.RunID == c.run && it.State != state.Terminated && it.State != state.Idle {
			continue // its instance still serves the run: it may be coming online right now
		}
		if err := p.d.GitHub.DeleteRunner(ctx, c.r.ID); err != nil {
			p.warn("housekeeping: delete offline runner %s: %v", c.r.Name, err)
			continue
		}
		p.d.Log.Info("housekeeping: deleted an offline runner left behind", "runner", c.r.Name)
	}
}

// parseRunnerName splits hangar-<instance id>-<run id>.
func parseRunnerName(name string) (id, run string, ok bool) {
	rest, found := strings.CutPrefix(name, "hangar-")
	if !found {
		return "", "", false
	}
	i := strings.LastIndex(rest, "-")
	if i < 0 {
		return "", "", false
	}
	id, run = rest[:i], rest[i+1:]
	if state.ValidateInstanceID(id) != nil || state.ValidateRunID(run) != nil {
		return "", "", false
	}
	return id, run, true
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "\n"); i >= 0 {
		s = s[i+1:]
	}
	return s
}
