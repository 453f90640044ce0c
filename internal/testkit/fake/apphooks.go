package fake

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
)

// AppHooks is the App's side of GitHub for the dispatcher's sweep: its webhook's delivery
// attempts (newest first, pageSize to a page) and its installations. Redeliver records the
// attempts asked for again.
type AppHooks struct {
	recorder

	mu            sync.Mutex
	deliveries    []ghapi.Delivery // newest first
	installations []int64
	redelivered   []int64
	pageSize      int
}

// NewAppHooks returns an App installed as installations, listing pageSize deliveries a page.
func NewAppHooks(pageSize int, installations ...int64) *AppHooks {
	return &AppHooks{pageSize: pageSize, installations: installations}
}

// Attempt records a delivery attempt, newer than every earlier one.
func (a *AppHooks) Attempt(d ghapi.Delivery) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if d.ID == 0 {
		d.ID = int64(len(a.deliveries) + 1)
	}
	a.deliveries = append([]ghapi.Delivery{d}, a.deliveries...)
}

// HookDeliveries returns a page of attempts from cursor (an index), newest first.
func (a *AppHooks) HookDeliveries(_ context.Context, cursor string) ([]ghapi.Delivery, string, error) {
	if err := a.call("HookDeliveries"); err != nil {
		return nil, "", err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	start, _ := strconv.Atoi(cursor)
	start = min(start, len(a.deliveries))
	end := min(start+a.pageSize, len(a.deliveries))
	next := ""
	if end < len(a.deliveries) {
		next = strconv.Itoa(end)
	}
	return slices.Clone(a.deliveries[start:end]), next, nil
}

// Redeliver records that attempt id was asked for again.
func (a *AppHooks) Redeliver(_ context.Context, id int64) error {
	if err := a.call("Redeliver"); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.redelivered = append(a.redelivered, id)
	return nil
}

// Redelivered returns the attempts asked for again, in order.
func (a *AppHooks) Redelivered() []int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.redelivered)
}

// Installations returns the App's installations, in one request.
func (a *AppHooks) Installations(context.Context, int) ([]int64, int, error) {
	if err := a.call("Installations"); err != nil {
		return nil, 1, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.installations), 1, nil
}

// workflowJob is a job of the fake installation's runs.
type workflowJob struct {
	repo string
	job  ghapi.WorkflowJob
}

// SetRepositories sets the repositories the installation may act on.
func (g *GitHub) SetRepositories(repos ...ghapi.Repository) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.repos = slices.Clone(repos)
}

// SetWorkflowJob adds (or replaces, by id) a job of repository repo's runs.
func (g *GitHub) SetWorkflowJob(repo string, j ghapi.WorkflowJob) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.wjobs = slices.DeleteFunc(g.wjobs, func(w workflowJob) bool { return w.job.ID == j.ID })
	g.wjobs = append(g.wjobs, workflowJob{repo: repo, job: j})
}

// Repositories lists the installation's repositories, in one request.
func (g *GitHub) Repositories(context.Context, int) ([]ghapi.Repository, int, error) {
	if err := g.call("Repositories"); err != nil {
		return nil, 1, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.repos), 1, nil
}

// ActiveRuns returns the runs of owner/name with a job that has not completed, in one request.
func (g *GitHub) ActiveRuns(_ context.Context, owner, name string) ([]ghapi.WorkflowRun, int, error) {
	if err := g.call("ActiveRuns"); err != nil {
		return nil, 1, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []ghapi.WorkflowRun
	for _, w := range g.wjobs {
		if strings.EqualFold(w.repo, owner+"/"+name) && w.job.Status != "completed" &&
			!slices.ContainsFunc(out, func(r ghapi.WorkflowRun) bool { return r.ID == w.job.RunID }) {
			out = append(out, ghapi.WorkflowRun{ID: w.job.RunID, Status: "queued", CreatedAt: w.job.CreatedAt})
		}
	}
	return out, 1, nil
}

// RunJobs returns the jobs of run runID of owner/name.
func (g *GitHub) RunJobs(_ context.Context, owner, name string, runID int64) ([]ghapi.WorkflowJob, error) {
	if err := g.call("RunJobs"); err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []ghapi.WorkflowJob
	for _, w := range g.wjobs {
		if strings.EqualFold(w.repo, owner+"/"+name) && w.job.RunID == runID {
			out = append(out, w.job)
		}
	}
	return out, nil
}
