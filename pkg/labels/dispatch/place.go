package dispatch

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// queuedJob is a queued job and the message it came in; round and since say how long it has
// waited for room under a cap (since zero: it has not).
type queuedJob struct {
	msg   Message
	job   jobs.Job
	round int
	since time.Time
	spare bool // jobs.Message.Spare
}

// waited reports whether the job's key was on its pool's waiters when its message came (a job
// that waited for room, or one placed again): its message places it only by taking it off.
func (q queuedJob) waited() bool { return !q.since.IsZero() || q.job.Redispatch > 0 }

// placement is a job handed to an instance.
type placement struct {
	job      jobs.Job
	instance *state.Instance
	reused   bool
}

// pending is one repository's jobs of a placement still without an instance, taken by the claims
// and creations as they are made (in parallel) and given back by the claims that were not won.
type pending struct {
	mu   sync.Mutex
	jobs []queuedJob
}

func (p *pending) pop() (queuedJob, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.jobs) == 0 {
		return queuedJob{}, false
	}
	j := p.jobs[0]
	p.jobs = p.jobs[1:]
	return j, true
}

// push gives a job back: its claim was lost, or its assignment could not be made.
func (p *pending) push(j queuedJob) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.jobs = append([]queuedJob{j}, p.jobs...)
}

// place places a batch's queued jobs and returns the ids of the messages to deliver again.
func (x *Dispatcher) place(ctx context.Context, queued []queuedJob) []string {
	return x.placeNeeded(ctx, x.unplaced(ctx, queued))
}

// placeNeeded places jobs unplaced kept.
func (x *Dispatcher) placeNeeded(ctx context.Context, queued []queuedJob) []string {
	if len(queued) == 0 {
		return nil
	}
	stack, err := x.d.Pools.LoadStack(ctx)
	if err != nil {
		x.d.Log.Error("read the stack's pool documents; the batch's jobs wait", "jobs", len(queued), "error", err)
		return messageIDs(queued)
	}
	return eachPool(queued, func(q queuedJob) string { return q.job.Pool }, func(name string, list []queuedJob) []string {
		ids, _, _ := x.placeInPool(ctx, stack.Pool(name), name, list, nil)
		return ids
	})
}

// eachPool runs do for each pool's share of items, the pools at once, and returns the message ids
// they all failed.
func eachPool[T any](items []T, poolOf func(T) string, do func(pool string, list []T) []string) []string {
	byPool := map[string][]T{}
	for _, it := range items {
		byPool[poolOf(it)] = append(byPool[poolOf(it)], it)
	}
	var (
		mu     sync.Mutex
		failed []string
		wg     sync.WaitGroup
	)
	for name, list := range byPool {
		wg.Go(func() {
			ids := do(name, list)
			mu.Lock()
			failed = append(failed, ids...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return failed
}

// unplaced drops the jobs that need no instance: those that ended without starting (a job
// cancelled while queued; GitHub may deliver completed before queued), and, among messages
// delivered again, those an earlier attempt placed (an instance holds their key). A job that
// has started is placed all the same: it started on another job's runner, and its placement is
// that job's now (started).
func (x *Dispatcher) unplaced(ctx context.Context, queued []queuedJob) []queuedJob {
	ids := make([]int64, len(queued))
	for i, q := range queued {
		ids[i] = q.job.ID
	}
	ended, err := x.d.Events.Events(ctx, "completed", ids)
	if err != nil {
		// Placing a job that has ended costs one instance until its check: not worth failing for.
		x.d.Log.Warn("read which jobs have completed; placing them all", "error", err)
	}
	var started map[int64]string // asked only of the jobs that ended: the rare case
	if len(ended) > 0 {
		if started, err = x.d.Events.Events(ctx, "in_progress", slices.Collect(maps.Keys(ended))); err != nil {
			x.d.Log.Warn("read which ended jobs had started; placing them all", "error", err)
			ended = nil
		}
	}
	out := queued[:0]
	for _, q := range queued {
		_, done := ended[q.job.ID]
		_, ran := started[q.job.ID]
		if done && !ran && !q.spare {
			x.d.Log.Info("job completed before it was placed; nothing to do", "job", q.job.ID, "repository", q.job.Repo)
			continue
		}
		if q.msg.Receives > 1 {
			if held, err := x.holder(ctx, q.job.Key()); err != nil {
				x.d.Log.Warn("look for an instance an earlier attempt gave the job", "job", q.job.ID, "error", err)
			} else if held != nil {
				x.d.Log.Info("job placed by an earlier attempt", "job", q.job.ID, "instance", held.ID)
				continue
			}
		}
		out = append(out, q)
	}
	return out
}

// holder returns the live instance that holds key, or nil.
func (x *Dispatcher) holder(ctx context.Context, key string) (*state.Instance, error) {
	held, err := x.d.Pool.Store.ByRun(ctx, key)
	if err != nil && !errors.Is(err, state.ErrBadItem) {
		return nil, err
	}
	for i := range held {
		if held[i].State != state.Terminated {
			return &held[i], nil
		}
	}
	return nil, nil
}

// placeInPool places one pool's jobs: claims for each repository's jobs, then one CreateFleet for
// all that are left. It returns the ids of the messages whose jobs could not be placed. woken,
// for jobs a wake took off the waiters, holds the idle instances just back in the pool (on no
// queue) that are claimed first; the ids of those claimed are returned (the others are the
// caller's to offer), and the room the creation left, for the wake to hand on. Jobs of a wake,
// and jobs that have waited, wait their turn at the cap's lease; a batch of new jobs does not
// (it waits for room with the waiters), and the room its creation leaves wakes waiting jobs.
func (x *Dispatcher) placeInPool(ctx context.Context, doc *pooldoc.Document, name string, list []queuedJob, woken *waking) ([]string, map[string]bool, int) {
	if doc == nil || doc.Jobs == nil {
		for _, q := range list {
			x.d.Log.Error("job routed to a pool that serves no label-routed jobs (any more); dropped", "job", q.job.ID,
				"repository", q.job.Repo, "pool", name)
		}
		x.count(name, "JobsFailed", len(list))
		return nil, nil, 0
	}
	// The webhook function routed each job and checked its repository and installation; the
	// pools may have changed since, and a job is placed only where its pool admits it now.
	list = slices.DeleteFunc(list, func(q queuedJob) bool {
		err := doc.Admits(q.job.Repo, q.job.Installation)
		if err == nil {
			return false
		}
		x.d.Log.Error("the pool does not admit the job; dropped", "job", q.job.ID, "repository", q.job.Repo,
			"installation", q.job.Installation, "pool", name, "error", err)
		x.count(name, "JobsFailed", 1)
		return true
	})
	if len(list) == 0 {
		return nil, nil, 0
	}
	if err := x.d.Pool.Resolve(ctx, doc); err != nil {
		x.d.Log.Error("the pool's instance types cannot be resolved; its jobs wait", "pool", name, "error", err)
		return messageIDs(list), nil, 0
	}
	start := x.d.Now()
	placed, acq, err := x.acquire(ctx, doc, list, woken)
	acquired := x.d.Now().Sub(start)
	if err != nil {
		x.d.Log.Error("acquire instances for jobs", "pool", name, "jobs", len(list), "error", err)
		return messageIDs(list), nil, 0
	}
	switch {
	case acq.ClaimErr != nil:
		x.d.Log.Warn("claim from the pool; creating what is missing", "pool", name, "error", acq.ClaimErr)
	case acq.StartErr != nil:
		x.d.Log.Warn("start claimed stopped instances", "pool", name, "error", acq.StartErr)
	}
	if acq.CreateErr != nil {
		x.d.Log.Error("create instances for jobs", "pool", name, "error", acq.CreateErr)
	}
	reused, took := 0, map[string]bool{}
	done := map[int64]bool{}
	for _, pl := range placed {
		done[pl.job.ID] = true
		if pl.reused {
			reused++
		}
		if woken != nil && slices.ContainsFunc(woken.given, func(in *state.Instance) bool { return in.ID == pl.instance.ID }) {
			took[pl.instance.ID] = true
		}
	}
	var failed []queuedJob
	for _, q := range list {
		if !done[q.job.ID] {
			failed = append(failed, q)
		}
	}
	x.scheduleChecks(ctx, doc, placed)
	var again []string // the messages to deliver again
	if acq.CapErr != nil && acq.CreateErr == nil && len(failed) > 0 {
		// Nothing failed but the cap: the jobs wait for room, off the queue's receive count.
		x.d.Log.Info("jobs wait for room under the cap", "pool", name, "jobs", len(failed), "why", acq.CapErr)
		again, failed = x.wait(ctx, doc, failed), nil
	}
	for _, q := range failed {
		x.d.Log.Error("job not placed; it is tried again", "job", q.job.ID, "repository", q.job.Repo, "pool", name,
			"receives", q.msg.Receives)
	}
	if acq.Room > 0 && woken == nil {
		// The cap had room to spare when this creation counted: jobs that waited for it (or
		// for this creation's turn) are placed in it now.
		x.wake(ctx, doc, nil, acq.Room)
	}
	x.count(name, "JobsFailed", len(failed))
	x.count(name, "JobsReused", reused)
	x.count(name, "JobsCreated", len(placed)-reused)
	x.d.Log.Info("jobs placed", "pool", name, "jobs", len(list), "reused", reused, "created", len(placed)-reused,
		"failed", len(failed), "ms", x.d.Now().Sub(start).Milliseconds(), "claimMs", acq.ClaimTook.Milliseconds(),
		"createMs", acq.CreateTook.Milliseconds(), "acquiredMs", acquired.Milliseconds())
	return append(again, messageIDs(failed)...), took, acq.Room
}

// acquire asks the pool for an instance per job: one group per repository, whose reuse scope
// decides which warm instances fit, claimed first; one CreateFleet for all that are left. Each
// instance gets its job as its claim or item is written (personalize: a just-in-time runner made
// for it), and the runner's configuration through its doorbell. A repository whose runners
// cannot be made (GitHub failing) gets no new instances: they would fail the same way. An
// instance created whose job could not be given is recorded without one, a warm instance of the
// pool. It returns the placements, every one the pool handed its configuration to.
func (x *Dispatcher) acquire(ctx context.Context, doc *pooldoc.Document, list []queuedJob, woken *waking) ([]placement, *pool.Acquired, error) {
	now := x.d.Now()
	claimID := randomID()
	clients := &clientCache{x: x, clients: map[string]Runners{}}
	byRepo := map[string]*pending{}
	var groups []pool.Group
	index := map[string]int{}
	// The App must be able to make each job's runner before anything is claimed or launched for
	// it: a job it cannot serve (a key GitHub refuses, a permission the installation lacks) waits
	// on the queue, and nothing is launched that would then idle without a runner.
	can := map[Runners]error{} // asked once per installation and scope
	list = slices.DeleteFunc(slices.Clone(list), func(q queuedJob) bool {
		gh, _, err := clients.get(ctx, doc, q.job)
		if err == nil {
			checked, ok := can[gh]
			if !ok {
				checked = gh.CanMakeRunners(ctx)
				can[gh] = checked
			}
			err = checked
		}
		if err == nil {
			return false
		}
		x.d.Log.Error("the GitHub App cannot make the job's runner now; nothing launched, the job waits", "job", q.job.ID,
			"repository", q.job.Repo, "installation", q.job.Installation, "error", err)
		if ghapi.IsAppRefused(err) { // not a passing outage: someone must mend the App
			x.d.Metrics.Emit(map[string]string{"Stack": x.cfg.Stack}, map[string]int{"AppErrors": 1})
		}
		return true
	})
	if len(list) == 0 {
		return nil, &pool.Acquired{}, nil
	}
	for _, q := range list {
		r := strings.ToLower(q.job.Repo)
		if _, ok := byRepo[r]; !ok {
			byRepo[r] = &pending{}
			index[r] = len(groups)
			groups = append(groups, pool.Group{Assign: x.base(doc, q.job, claimID)})
		}
		byRepo[r].jobs = append(byRepo[r].jobs, q)
		groups[index[r]].Count++
	}
	// made is what each assignment completed for an instance holds: the job and its runner's
	// configuration (in memory only), by instance and job key, so that one instance's claims for
	// two jobs (a second offer of it) never mix.
	var made sync.Map // assignmentKey → assigned
	var fit pool.Fit
	if woken != nil {
		fit.Given = woken.given
	}
	acq, err := x.d.Pool.Acquire(ctx, pool.Request{
		Doc: doc, Groups: groups, Fit: fit,
		// A job does not hold its batch while another creation counts against the cap: it waits
		// for room with the others, and that creation wakes them to the room it leaves.
		Launch: pool.Launch{Token: createToken(doc.Name, list), Deadline: now.Add(x.cfg.CreateWait), Reason: "created for label-routed jobs",
			NoWait: woken == nil && !slices.ContainsFunc(list, queuedJob.waited)},
		// The claim's deadline leaves the job's check a whole claimed timeout to act first: the
		// check removes a waiting runner from GitHub, which refresh, expiring the claim, cannot.
		ClaimDeadline: now.Add(x.bound(doc) + doc.Timeout(state.Claimed)),
		Personalize: func(ctx context.Context, id string, a *state.Assignment) error {
			p := byRepo[strings.ToLower(a.Repo)]
			q, ok := p.pop()
			if !ok {
				return pool.ErrNoneLeft
			}
			config, err := x.personalize(ctx, doc, clients, q.job, id, a)
			if err != nil {
				p.push(q)
				return err
			}
			made.Store(assignmentKey(id, a.RunID), assigned{q: q, config: config})
			return nil
		},
		Unused: func(id string, a state.Assignment) {
			v, ok := made.LoadAndDelete(assignmentKey(id, a.RunID))
			if !ok {
				return
			}
			q := v.(assigned).q
			x.unmint(ctx, clients, q.job, doc, a.RunnerID)
			byRepo[strings.ToLower(a.Repo)].push(q)
		},
		// An instance is handed only the configuration made for the job its item holds.
		Secret: func(in *state.Instance) (pool.Secret, bool) {
			v, ok := made.Load(assignmentKey(in.ID, in.RunID))
			if !ok {
				return pool.Secret{}, false
			}
			return pool.Secret{Kind: pool.KindJIT, Value: v.(assigned).config}, true
		},
	})
	if err != nil {
		return nil, nil, err
	}
	defer acq.Wait() // the hand-overs sent and the pool's messages tidied before the batch ends
	var placed []placement
	for _, in := range acq.Claimed {
		if v, ok := made.Load(assignmentKey(in.ID, in.RunID)); ok {
			placed = append(placed, placement{job: v.(assigned).q.job, instance: in, reused: true})
		}
	}
	for _, in := range acq.Created {
		if v, ok := made.Load(assignmentKey(in.ID, in.RunID)); ok {
			placed = append(placed, placement{job: v.(assigned).q.job, instance: in})
		}
	}
	return placed, acq, nil
}

// base is the part of a job's assignment its instance does not change.
func (x *Dispatcher) base(doc *pooldoc.Document, j jobs.Job, claimID string) state.Assignment {
	scope := scopeOf(doc, j.Repo)
	a := state.Assignment{Repo: j.Repo, RunnerURL: scope.RunnerURL(doc.GitHubURL), RunnerPrefix: x.names.Prefix(), ClaimID: claimID, Job: j.Info()}
	if scope.IsOrg() {
		a.RunnerGroup = x.names.RepositoryGroup(j.RepoID)
	}
	return a
}

// personalize completes the assignment of job j to instance id: the job's key, and a just-in-time
// runner made for that instance, whose configuration it returns, to be kept in memory until it is
// handed to the instance alone through its doorbell (the pool's hand-over): never in the table.
func (x *Dispatcher) personalize(ctx context.Context, doc *pooldoc.Document, clients *clientCache, j jobs.Job, id string, a *state.Assignment) (string, error) {
	*a = x.base(doc, j, a.ClaimID)
	a.RunID, a.Installation = j.Key(), j.Installation
	gh, group, err := clients.get(ctx, doc, j)
	if err != nil {
		return "", err
	}
	name := x.names.Name(id, j.Key())
	jit, err := x.mint(ctx, gh, ghapi.JITRequest{Name: name, Labels: doc.Jobs.RunnerLabels(), GroupID: group})
	if err != nil {
		return "", err
	}
	a.RunnerID, a.HandOverSum = jit.RunnerID, state.SecretSum(jit.Config)
	return jit.Config, nil
}

// assigned is a job given to an instance, with the configuration of the runner made for it.
type assigned struct {
	q      queuedJob
	config string
}

// assignmentKey keys what was made for one instance and one job.
func assignmentKey(instanceID, key string) string { return instanceID + "/" + key }

// mint makes a just-in-time runner. A runner of the same name exists only when an earlier attempt
// at this very assignment (this instance, this job) made it and died before the claim was written:
// it never served, and is made again.
func (x *Dispatcher) mint(ctx context.Context, gh Runners, r ghapi.JITRequest) (ghapi.JIT, error) {
	jit, err := gh.GenerateJITConfig(ctx, r)
	if !ghapi.IsConflict(err) {
		return jit, err
	}
	old, ferr := gh.RunnerByName(ctx, r.Name)
	if ferr == nil {
		ferr = gh.DeleteRunner(ctx, old.ID)
	}
	if ferr != nil && !ghapi.IsNotFound(ferr) {
		return ghapi.JIT{}, fmt.Errorf("%w; and the runner of that name could not be replaced: %w", err, ferr)
	}
	return gh.GenerateJITConfig(ctx, r)
}

// unmint deletes a runner made for a claim that was not won; should that fail, the runner stays
// offline, takes no job, and GitHub removes it within a day (an ephemeral runner that never
// connected). No sweep may: it cannot tell it from one whose claim is on its way.
func (x *Dispatcher) unmint(ctx context.Context, clients *clientCache, j jobs.Job, doc *pooldoc.Document, runnerID int64) {
	if runnerID == 0 {
		return
	}
	gh, _, err := clients.get(ctx, doc, j)
	if err == nil {
		err = gh.DeleteRunner(context.WithoutCancel(ctx), runnerID)
	}
	if err != nil {
		x.d.Log.Warn("delete the runner of a claim that was lost; GitHub removes it within a day", "job", j.ID, "runner", runnerID, "error", err)
	}
}

// scopeOf is where a job's runner is registered: its repository, or its organisation.
func scopeOf(doc *pooldoc.Document, repo string) ghapi.Scope {
	owner, name, _ := strings.Cut(repo, "/")
	if doc.Jobs.OrgScope() {
		return ghapi.Scope{Owner: owner}
	}
	return ghapi.Scope{Owner: owner, Repo: name}
}

// clientCache keeps one batch's GitHub clients, by installation and scope, with the scope's
// runner group id.
type clientCache struct {
	x       *Dispatcher
	mu      sync.Mutex
	clients map[string]Runners
}

func (c *clientCache) get(ctx context.Context, doc *pooldoc.Document, j jobs.Job) (Runners, int64, error) {
	scope := scopeOf(doc, j.Repo)
	key := fmt.Sprintf("%d %s", j.Installation, strings.ToLower(scope.String()))
	c.mu.Lock()
	gh, ok := c.clients[key]
	c.mu.Unlock()
	if !ok {
		var err error
		if gh, err = c.x.d.GitHub(j.Installation, scope); err != nil {
			return nil, 0, err
		}
		c.mu.Lock()
		c.clients[key] = gh
		c.mu.Unlock()
	}
	if !scope.IsOrg() {
		return gh, ghapi.RepositoryGroupID, nil
	}
	if j.RepoID < 1 {
		return nil, 0, fmt.Errorf("job %d of %s: no repository id, and an organisation-scoped runner is made in its repository's own group", j.ID, j.Repo)
	}
	id, err := c.x.groupID(ctx, gh, scope.Owner, c.x.names.RepositoryGroup(j.RepoID), j.RepoID)
	return gh, id, err
}

// groupID returns the id of the runner group of an organisation's repository, asked of GitHub
// (and made there when missing) once per process: the placements of one batch that need it at
// once wait for the first to ask.
func (x *Dispatcher) groupID(ctx context.Context, gh Runners, org, name string, repoID int64) (int64, error) {
	key := strings.ToLower(org) + "/" + name
	x.groupsMu.Lock()
	defer x.groupsMu.Unlock()
	if id, ok := x.groups[key]; ok {
		return id, nil
	}
	id, err := gh.RepositoryGroup(ctx, name, repoID)
	if err != nil {
		return 0, err
	}
	x.groups[key] = id
	return id, nil
}

// createToken is the idempotency token of the CreateFleet of a pool's jobs of a batch, on one
// delivery of their messages: a request the SDK retries gets the same instances back. A delivery after a
// failed attempt asks anew (the earlier attempt's instances are recorded, warm, or reaped by
// refresh as orphans when it died before recording them).
func createToken(pool string, list []queuedJob) string {
	keys := make([]string, len(list))
	receives := 0
	for i, q := range list {
		keys[i] = q.job.Key()
		receives = max(receives, q.msg.Receives)
	}
	slices.Sort(keys)
	sum := sha256.Sum256([]byte(strings.Join(keys, ",")))
	return fmt.Sprintf("hangar-jobs-%s-%s-%d", pool, hex.EncodeToString(sum[:8]), receives)
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func messageIDs(list []queuedJob) []string {
	out := make([]string, len(list))
	for i, q := range list {
		out[i] = q.msg.ID
	}
	return out
}

// count adds n to a per-pool metric.
func (x *Dispatcher) count(pool, name string, n int) {
	if n > 0 {
		x.d.Metrics.Emit(map[string]string{"Stack": x.cfg.Stack, "Pool": pool}, map[string]int{name: n})
	}
}
