package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
)

// The sweep recovers what GitHub did not deliver (docs/labels.md, "Lost deliveries"). GitHub
// does not retry a failed delivery by itself; the stack's schedule puts a sweep message on the
// jobs queue, and the dispatcher, which holds the App's key:
//
//  1. lists the App webhook's deliveries since the last sweep and asks GitHub to deliver again
//     each workflow_job event none of whose attempts was taken (a timeout, 429, 5xx, or 401
//     while the secret was being rotated) and none of which was a redelivery: once per event;
//  2. lists, for each installation and repository of the trust set, the jobs of its runs that
//     have not completed, and admits, as the webhook would have, each of the stack's jobs queued
//     for longer than MissingAfter whose queued event was never recorded: a delivery GitHub never
//     made, or whose redelivery failed too.
//
// Both are bounded by SweepRequests GitHub requests per sweep; a sweep runs at most once per
// half SweepEvery, whoever sends the message.

// Defaults of the sweep.
const (
	// DefaultSweepEvery is the period of the stack's sweep schedule.
	DefaultSweepEvery = 5 * time.Minute
	// DefaultMissingAfter is how long a queued job may go unrecorded before the sweep admits it:
	// longer than a delivery and the previous sweep's redelivery take.
	DefaultMissingAfter = 2 * time.Minute
	// DefaultSweepRequests bounds one sweep's GitHub requests: 12 sweeps an hour make at most
	// 600, an eighth of an installation's 5,000 an hour.
	DefaultSweepRequests = 50
)

// sweepOverlap is how far before the last sweep the next one looks again: an attempt GitHub had
// not yet listed then (a delivery takes up to ten seconds) is seen now.
const sweepOverlap = time.Minute

// firstSweepLookback is how far back the first sweep of a stack looks.
const firstSweepLookback = time.Hour

// repositoriesFor is how long the installations' repositories are kept before they are listed
// again: they change rarely, and listing them costs a request per installation.
const repositoriesFor = time.Hour

// sweepTimeout bounds one sweep, well within the dispatcher's two minutes: what it did not reach,
// the next one does.
const sweepTimeout = time.Minute

// sweepPerRepo bounds the requests one repository's runs take of a sweep, so that a repository
// with many runs stuck queued cannot keep the sweep from the others.
const sweepPerRepo = 8

// sweepPages bounds the pages of one installation's repositories (100 each) and of the App's
// installations the sweep lists.
const sweepPages = 10

// sweepCursor names the cursor of the sweeps (state.Store.Cursor): when the last one started.
const sweepCursor = "sweep"

// AppHooks is what the sweep asks GitHub as the App itself (ghclient.AppClient).
type AppHooks interface {
	HookDeliveries(ctx context.Context, cursor string) ([]ghapi.Delivery, string, error)
	Redeliver(ctx context.Context, id int64) error
	// Installations lists at most maxPages pages of the App's installations.
	Installations(ctx context.Context, maxPages int) ([]int64, int, error)
}

// Workflows is what the sweep asks GitHub as one installation (ghclient.Client).
type Workflows interface {
	// Repositories lists at most maxPages pages of the installation's repositories.
	Repositories(ctx context.Context, maxPages int) ([]ghapi.Repository, int, error)
	ActiveRuns(ctx context.Context, owner, name string) ([]ghapi.WorkflowRun, int, error)
	RunJobs(ctx context.Context, owner, name string, runID int64) ([]ghapi.WorkflowJob, error)
}

// Cursors keep where the sweeps have got to (state.Store).
type Cursors interface {
	Cursor(ctx context.Context, name string) (time.Time, error)
	AdvanceCursor(ctx context.Context, name string, from, to time.Time) (bool, error)
}

// sweepRepo is a repository of the trust set, through the installation that reaches it.
type sweepRepo struct {
	installation int64
	repo         ghapi.Repository
}

// sweepState is what one dispatcher keeps between sweeps: the trust set's repositories and
// where the last sweep stopped among them.
type sweepState struct {
	mu     sync.Mutex
	repos  []sweepRepo
	listed time.Time
	next   int
	// runFrom is, per repository id, the run its last sweep stopped after.
	runFrom map[int64]int64
	// asked are the events this dispatcher asked GitHub to redeliver, and when: GitHub makes the
	// attempt later, and until it lists it a sweep would ask again.
	asked map[string]time.Time
}

// errBudget ends a sweep's work when its GitHub requests are spent.
var errBudget = errors.New("the sweep's GitHub requests are spent")

// budget counts a sweep's GitHub requests.
type budget struct{ left, used int }

func (b *budget) spend(n int) error {
	b.left -= n
	b.used += n
	if b.left < 0 {
		return errBudget
	}
	return nil
}

// sweep runs one sweep, unless one ran within half the sweep period.
func (x *Dispatcher) sweep(ctx context.Context) error {
	now := x.d.Now()
	from, err := x.d.Cursors.Cursor(ctx, sweepCursor)
	if err != nil {
		return err
	}
	if !from.IsZero() && now.Sub(from) < x.cfg.SweepEvery/2 {
		x.d.Log.Debug("sweep skipped: one ran moments ago", "last", from)
		return nil
	}
	if ok, err := x.d.Cursors.AdvanceCursor(ctx, sweepCursor, from, now); err != nil || !ok {
		return err // !ok: another sweep took this window
	}
	since := from.Add(-sweepOverlap)
	if from.IsZero() {
		since = now.Add(-firstSweepLookback)
	}
	ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	b := &budget{left: x.cfg.SweepRequests}
	var redelivered, recovered int
	stack, err := x.d.Pools.LoadStack(ctx)
	var router *jobs.Router
	if err == nil {
		router, err = jobs.NewRouter(stack.Pools)
	}
	var repos []sweepRepo
	if err == nil {
		repos, err = x.sweepRepos(ctx, now, router, b)
	}
	if err == nil {
		var errD, errJ error
		redelivered, errD = x.redeliver(ctx, since, repos, b)
		recovered, errJ = x.recoverQueued(ctx, now, router, repos, b)
		err = errors.Join(errD, errJ)
	}
	bounded := 0
	if errors.Is(err, errBudget) {
		x.d.Log.Warn("sweep stopped at its bound of GitHub requests; the next one goes on", "requests", x.cfg.SweepRequests)
		err, bounded = nil, 1
	}
	failed := 0
	if err != nil {
		failed = 1
	}
	x.d.Metrics.Emit(map[string]string{"Stack": x.cfg.Stack}, map[string]int{"DeliveriesRedelivered": redelivered, "JobsRecovered": recovered,
		"SweepRequests": b.used, "SweepErrors": failed, "SweepsBounded": bounded})
	x.d.Log.Info("swept", "redelivered", redelivered, "recovered", recovered, "requests", b.used, "since", since, "error", err)
	return err
}

// taken reports whether an attempt's answer ends the event: taken (2xx), or refused in a way a
// redelivery would be refused again (400, 403, 413: malformed, outside the trust set, too big).
// No answer, 401 (a secret being rotated), 408, 429 and 5xx are worth another attempt.
func taken(code int) bool {
	switch {
	case code == 0, code == http.StatusUnauthorized, code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500:
		return false
	}
	return true
}

// redeliver asks GitHub to deliver again each workflow_job event of the trust set's repositories
// since since that none of its listed attempts delivered, unless one of them is a redelivery
// already; it returns how many.
func (x *Dispatcher) redeliver(ctx context.Context, since time.Time, repos []sweepRepo, b *budget) (int, error) {
	trusted := map[int64]bool{}
	for _, r := range repos {
		trusted[r.repo.ID] = true
	}
	byEvent := map[string][]ghapi.Delivery{}
	var order []string
	cursor := ""
	for {
		// Half the budget at most goes to listing: the rest redelivers what it found, and looks
		// for jobs no delivery brought.
		if b.used >= x.cfg.SweepRequests/2 {
			x.d.Log.Warn("more deliveries since the last sweep than the sweep lists; the older ones are not looked at", "since", since)
			break
		}
		if err := b.spend(1); err != nil {
			return 0, err
		}
		page, next, err := x.d.App.HookDeliveries(ctx, cursor)
		if err != nil {
			return 0, err
		}
		older := false
		for _, d := range page {
			if d.At.Before(since) {
				older = true
				continue
			}
			if _, seen := byEvent[d.GUID]; !seen {
				order = append(order, d.GUID)
			}
			byEvent[d.GUID] = append(byEvent[d.GUID], d)
		}
		if older || next == "" {
			break
		}
		cursor = next
	}
	now := x.d.Now()
	n := 0
	for _, guid := range order {
		attempts := byEvent[guid]
		// Only the trust set's job events: an installation on a whole organisation delivers every
		// repository's, and those would be refused again.
		first := attempts[0]
		if first.Event != "workflow_job" || !admissible(first.Action) || !trusted[first.RepositoryID] ||
			slices.ContainsFunc(attempts, func(d ghapi.Delivery) bool { return taken(d.StatusCode) || d.Redelivery }) ||
			x.askedRecently(guid, now) {
			continue
		}
		// A quarter of the budget is left for the jobs no delivery brought.
		if b.used >= x.cfg.SweepRequests*3/4 {
			return n, errBudget
		}
		if err := b.spend(1); err != nil {
			return n, err
		}
		latest := attempts[0] // newest first
		if err := x.d.App.Redeliver(ctx, latest.ID); err != nil {
			return n, fmt.Errorf("redeliver event %s (%s): %w", guid, latest.Action, err)
		}
		x.swept.mu.Lock()
		x.swept.asked[guid] = now
		x.swept.mu.Unlock()
		x.d.Log.Info("delivery redelivered", "delivery", guid, "action", latest.Action, "status", latest.StatusCode,
			"installation", latest.Installation, "repositoryId", latest.RepositoryID)
		n++
	}
	return n, nil
}

// askedRecently reports whether this dispatcher asked for event guid to be delivered again
// within the windows sweeps look at (GitHub makes the attempt later; until it lists it, a sweep
// would ask again), forgetting the events asked for before them.
func (x *Dispatcher) askedRecently(guid string, now time.Time) bool {
	x.swept.mu.Lock()
	defer x.swept.mu.Unlock()
	if x.swept.asked == nil {
		x.swept.asked = map[string]time.Time{}
	}
	for g, at := range x.swept.asked {
		if now.Sub(at) > 2*x.cfg.SweepEvery+sweepOverlap {
			delete(x.swept.asked, g)
		}
	}
	_, ok := x.swept.asked[guid]
	return ok
}

// recoverQueued admits the stack's jobs queued for longer than MissingAfter whose queued event
// the table has no record of, going round the trust set's repositories as far as the budget
// lets it; it returns how many it admitted.
func (x *Dispatcher) recoverQueued(ctx context.Context, now time.Time, router *jobs.Router, repos []sweepRepo, b *budget) (int, error) {
	if len(repos) == 0 {
		return 0, nil
	}
	x.swept.mu.Lock()
	start := x.swept.next % len(repos)
	x.swept.mu.Unlock()
	var (
		found   []sweptJob
		visited int
		errs    []error
	)
	for visited < len(repos) {
		r := repos[(start+visited)%len(repos)]
		if b.left < 2 { // its runs and one run's jobs
			errs = append(errs, errBudget)
			break
		}
		js, err := x.queuedIn(ctx, now, router, r, b)
		found = append(found, js...)
		if errors.Is(err, errBudget) {
			errs = append(errs, err)
			break // the next sweep starts with it
		}
		visited++ // gone past even when its runs took its whole share: the next sweep goes on there
		if err != nil {
			errs = append(errs, fmt.Errorf("sweep %s: %w", r.repo.FullName, err))
		}
	}
	x.swept.mu.Lock()
	x.swept.next = start + visited
	x.swept.mu.Unlock()
	n, err := x.admitMissing(ctx, now, router, found)
	return n, errors.Join(append(errs, err)...)
}

// sweepRepos returns the repositories of the trust set, through each installation that
// reaches them, listed again every repositoriesFor.
func (x *Dispatcher) sweepRepos(ctx context.Context, now time.Time, router *jobs.Router, b *budget) ([]sweepRepo, error) {
	x.swept.mu.Lock()
	if !x.swept.listed.IsZero() && now.Sub(x.swept.listed) < repositoriesFor {
		defer x.swept.mu.Unlock()
		return x.swept.repos, nil
	}
	x.swept.mu.Unlock()
	ids, pages, err := x.d.App.Installations(ctx, sweepPages)
	if err := errors.Join(err, b.spend(pages)); err != nil {
		return nil, err
	}
	var repos []sweepRepo
	for _, id := range ids {
		if errors.Is(router.Trusted("", id), pooldoc.ErrInstallation) {
			continue // outside github.installations: nothing of it is served
		}
		if b.left < 1 {
			break // listed from the next sweep's, as far as this one got
		}
		gh, err := x.d.GitHub(id, ghapi.Scope{})
		if err != nil {
			return nil, err
		}
		list, pages, err := gh.Repositories(ctx, min(sweepPages, b.left))
		b.used += pages
		b.left -= pages
		if err != nil {
			return nil, fmt.Errorf("installation %d: %w", id, err)
		}
		for _, r := range list {
			if !r.Archived && router.Trusted(r.FullName, id) == nil {
				repos = append(repos, sweepRepo{installation: id, repo: r})
			}
		}
	}
	x.swept.mu.Lock()
	defer x.swept.mu.Unlock()
	x.swept.repos, x.swept.listed = repos, now
	return repos, nil
}

// sweptJob is one of the stack's jobs the sweep found in a repository's runs.
type sweptJob struct {
	job     jobs.Job
	queued  bool // GitHub has it queued still
	created time.Time
}

// queuedIn returns the stack's jobs of repository r's runs that are not done, created longer than
// MissingAfter ago.
func (x *Dispatcher) queuedIn(ctx context.Context, now time.Time, router *jobs.Router, r sweepRepo, b *budget) ([]sweptJob, error) {
	gh, err := x.d.GitHub(r.installation, ghapi.Scope{})
	if err != nil {
		return nil, err
	}
	owner, name, _ := strings.Cut(r.repo.FullName, "/")
	share := b.used + sweepPerRepo // this repository's requests end there
	if err := b.spend(1); err != nil {
		return nil, err
	}
	runs, _, err := gh.ActiveRuns(ctx, owner, name)
	if err != nil {
		return nil, err
	}
	// Oldest first, from after the run the last sweep of the repository stopped at: a job lost
	// longest is found first, and runs stuck queued do not hide the others. A run younger than
	// MissingAfter has no job that old.
	slices.SortFunc(runs, func(a, b ghapi.WorkflowRun) int { return a.CreatedAt.Compare(b.CreatedAt) })
	runs = slices.DeleteFunc(runs, func(run ghapi.WorkflowRun) bool { return now.Sub(run.CreatedAt) < x.cfg.MissingAfter })
	x.swept.mu.Lock()
	from := x.swept.runFrom[r.repo.ID]
	x.swept.mu.Unlock()
	if i := slices.IndexFunc(runs, func(run ghapi.WorkflowRun) bool { return run.ID == from }); i >= 0 {
		runs = append(runs[i+1:], runs[:i+1]...)
	}
	stopped := int64(0)
	defer func() {
		x.swept.mu.Lock()
		defer x.swept.mu.Unlock()
		if x.swept.runFrom == nil {
			x.swept.runFrom = map[int64]int64{}
		}
		x.swept.runFrom[r.repo.ID] = stopped
	}()
	var out []sweptJob
	for _, run := range runs {
		if b.used >= share {
			break // the next sweep goes on from here
		}
		if err := b.spend(1); err != nil {
			return out, err
		}
		stopped = run.ID
		list, err := gh.RunJobs(ctx, owner, name, run.ID)
		if err != nil {
			return out, err
		}
		for _, j := range list {
			// A job that started or ended on a sibling's runner needs its placement all the same:
			// that sibling waits for it (GitHub gives jobs to runners in any order).
			if !admissible(j.Status) || !router.Ours(j.Labels) || now.Sub(j.CreatedAt) < x.cfg.MissingAfter {
				continue
			}
			out = append(out, sweptJob{job: jobs.Job{ID: j.ID, RunID: j.RunID, RunAttempt: j.RunAttempt, Repo: r.repo.FullName,
				RepoID: r.repo.ID, Labels: j.Labels, Installation: r.installation, Delivery: "sweep"}, queued: j.Status == "queued",
				created: j.CreatedAt})
		}
	}
	return out, nil
}

// admissible reports whether a job in status may need a placement the sweep makes: queued, or
// started or ended (on a sibling's runner; the dispatcher tells, as for a delivered one).
func admissible(status string) bool {
	return status == "queued" || status == "in_progress" || status == "completed"
}

// admitMissing admits, as the webhook does a queued delivery, each job of found whose queued
// event is not recorded: routed and judged by the trust set, recorded (so that a late delivery is
// a duplicate) and put on the jobs queue; and places again the recorded ones stranded (rescue).
// It returns how many it admitted or placed again.
func (x *Dispatcher) admitMissing(ctx context.Context, now time.Time, router *jobs.Router, found []sweptJob) (int, error) {
	if len(found) == 0 {
		return 0, nil
	}
	ids := make([]int64, len(found))
	for i, f := range found {
		ids[i] = f.job.ID
	}
	recorded, err := x.d.Events.Events(ctx, string(jobs.KindQueued), ids)
	if err != nil {
		return 0, err
	}
	rescued, rescueErr := x.rescue(ctx, now, found, recorded)
	var (
		msgs []jobs.Message
		errs []error
	)
	for _, f := range found {
		j := f.job
		if _, ok := recorded[j.ID]; ok {
			continue
		}
		pool, err := router.Admit(j.Repo, j.Installation, j.Labels)
		if err != nil {
			x.d.Log.Debug("a queued job the sweep leaves alone", "job", j.ID, "repository", j.Repo, "why", err)
			continue
		}
		j.Pool = pool.Name
		msg := jobs.Message{Kind: jobs.KindQueued, Job: j}
		body, err := msg.Encode()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		first, err := x.d.Events.RecordEvent(ctx, j.ID, string(jobs.KindQueued), body)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if first {
			msgs = append(msgs, msg)
			x.d.Log.Warn("a queued job no delivery brought: admitted by the sweep", "job", j.ID, "repository", j.Repo, "pool", j.Pool)
		}
	}
	failed, err := x.sendEach(ctx, msgs, nil)
	// Those not sent are forgotten, so that the next sweep (or a delivery) admits them again.
	for _, i := range failed {
		if ferr := x.d.Events.ForgetEvent(context.WithoutCancel(ctx), msgs[i].Job.ID, string(jobs.KindQueued)); ferr != nil {
			errs = append(errs, ferr)
		}
	}
	return len(msgs) - len(failed) + rescued, errors.Join(append(errs, err, rescueErr)...)
}

// rescue places again each job of found GitHub has had queued for longer than MissingAfter and
// its runner's bound although its queued event was recorded, when its pool has no job waiting
// for room and no instance holds any of its keys: its runner vanished with nothing left to say so
// (an event lost for good). Placing again is bounded as for any lost runner (jobs.MaxRedispatch),
// and the placement is not a spare: a job that has started or ended meanwhile is not placed.
func (x *Dispatcher) rescue(ctx context.Context, now time.Time, found []sweptJob, recorded map[int64]string) (int, error) {
	n := 0
	var errs []error
	for _, f := range found {
		body, ok := recorded[f.job.ID]
		if !ok || !f.queued {
			continue
		}
		msg, err := jobs.Parse(body)
		if err != nil {
			continue // not the webhook's record (a test's, or another version's): nothing to go by
		}
		doc, err := x.pool(ctx, msg.Job.Pool)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if now.Sub(f.created) < x.cfg.MissingAfter+x.bound(doc) {
			continue
		}
		latest, held, err := x.keysOf(ctx, f.job.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if held {
			continue
		}
		// A job waiting for room waits its turn (a wake or its own try places it). One a wake took
		// off the waiters and then lost (its invocation died) is on neither: it is placed again.
		if waits, err := x.d.Waiting.IsWaiting(ctx, doc.Name, latest); err != nil || waits {
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		x.d.Log.Warn("a job queued with no instance and no runner on its way: placed again", "job", f.job.ID, "repository", msg.Job.Repo,
			"pool", doc.Name, "key", latest)
		if err := x.redispatch(ctx, f.job.ID, latest, msg.Job); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// keysOf returns the latest key job was placed under (j<id>, or j<id>r<n> after n placings
// again) and whether an instance holds any of them.
func (x *Dispatcher) keysOf(ctx context.Context, job int64) (string, bool, error) {
	latest := names.JobKey(job, 0)
	for n := 0; n <= jobs.MaxRedispatch; n++ {
		key := names.JobKey(job, n)
		if n > 0 {
			seen, err := x.d.Events.Events(ctx, redispatched(n), []int64{job})
			if err != nil {
				return "", false, err
			}
			if _, ok := seen[job]; !ok {
				break
			}
			latest = key
		}
		held, err := x.holder(ctx, key)
		if err != nil || held != nil {
			return latest, held != nil, err
		}
	}
	return latest, false, nil
}
