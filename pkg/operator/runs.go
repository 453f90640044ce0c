package operator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// History is the part of the state store the history views read.
type History interface {
	RunRecords(ctx context.Context, pool string, since, until time.Time) ([]state.RunRecord, error)
	InPoolState(ctx context.Context, pool string, st state.State) ([]state.Instance, error)
	// Holding returns the live instances holding runs, with only what says the hold.
	Holding(ctx context.Context, pool string) ([]state.Instance, error)
	Ended(ctx context.Context, pool string, since, until time.Time) ([]state.Instance, error)
}

// Held is one instance's service to one run: ended (from its run record) or still going (from
// the live item, up to now).
type Held struct {
	Run        string    `json:"run"`
	Attempt    int       `json:"attempt"`
	Repo       string    `json:"repository"`
	InstanceID string    `json:"instanceId"`
	Pool       string    `json:"pool"`
	Type       string    `json:"instanceType"`
	UsageClass string    `json:"usageClass"`
	Claimed    bool      `json:"reused"`
	AssignedAt time.Time `json:"assignedAt"`
	Registered time.Time `json:"registeredAt,omitzero"`
	EndedAt    time.Time `json:"endedAt,omitzero"` // zero while it lasts
	Outcome    string    `json:"outcome"`
	Reason     string    `json:"reason,omitempty"`
	Seconds    float64   `json:"seconds"`
	Price      float64   `json:"priceUsdPerHour,omitempty"`
	PriceKnown bool      `json:"priceKnown"`
	Cost       float64   `json:"costUsd"`
	// Job is set when the instance served a label-routed job rather than a workflow run.
	Job *JobView `json:"job,omitempty"`
}

// JobView is a label-routed job as the operator sees it: GitHub's id, name, workflow and page,
// and whether the runner made for it ran it or lost it to another job.
type JobView struct {
	ID       int64  `json:"id"`
	Name     string `json:"name,omitempty"`
	Workflow string `json:"workflow,omitempty"`
	URL      string `json:"url,omitempty"`
	// TookJob is the job the runner ran (0 while none has started on it).
	TookJob int64 `json:"tookJob,omitempty"`
}

// Ran says what became of the runner made for the job.
func (j JobView) Ran() string {
	switch j.TookJob {
	case 0:
		return "no job started on its runner"
	case j.ID:
		return "its runner ran it"
	}
	return fmt.Sprintf("its runner ran job %d instead (the job got another)", j.TookJob)
}

// jobView is the job a run key names, or nil for a workflow run's key.
func jobView(key string, info *state.JobInfo, took int64) *JobView {
	id, _, ok := names.ParseJobKey(key)
	if !ok {
		return nil
	}
	v := &JobView{ID: id, TookJob: took}
	if info != nil {
		v.Name, v.Workflow, v.URL = info.Name, info.Workflow, info.URL
	}
	return v
}

// RunSummary is one run attempt: its instances, how they came and went, and what it cost.
type RunSummary struct {
	Run       string    `json:"run"`
	Attempt   int       `json:"attempt"`
	Repo      string    `json:"repository"`
	Pools     []string  `json:"pools"`
	Instances int       `json:"instances"`
	Reused    int       `json:"reused"`
	Created   int       `json:"created"`
	Started   time.Time `json:"started"`
	// ProvisionSeconds is from the first assignment to the last registration (0 when none
	// registered); Ended is when the last instance was let go (zero while the run holds one).
	ProvisionSeconds float64   `json:"provisionSeconds"`
	Ended            time.Time `json:"ended,omitzero"`
	// Outcome is "running", "released" (every instance given back), or the terminations.
	Outcome string  `json:"outcome"`
	Cost    float64 `json:"costUsd"`
	// PriceUnknown counts instances whose price is unknown: Cost leaves them out.
	PriceUnknown int    `json:"priceUnknown"`
	Held         []Held `json:"held"`
	// Job is set for a label-routed job: the summary is the job's, not a workflow run's.
	Job *JobView `json:"job,omitempty"`
}

// Window is a span of history, and which pools and repository to look at (all when empty).
type Window struct {
	Since, Until time.Time
	Pools        []string
	Repo         string
}

// held reads every instance-run of the window: run records ended in it, and what live items
// hold now (counted up to Until).
func (i *Operator) held(ctx context.Context, w Window) ([]Held, error) {
	if i.d.History == nil {
		return nil, errors.New("operator: Deps.History not set")
	}
	docs, err := i.pools(w.Pools)
	if err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		out  []Held
		errs []error
		wg   sync.WaitGroup
	)
	add := func(h []Held, err error) {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, h...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, doc := range docs {
		wg.Go(func() {
			recs, err := i.d.History.RunRecords(ctx, doc.Name, w.Since, w.Until)
			hs := make([]Held, 0, len(recs))
			for _, r := range recs {
				hs = append(hs, fromRecord(r))
			}
			add(hs, err)
		})
		wg.Go(func() {
			items, err := i.d.History.Holding(ctx, doc.Name)
			hs := make([]Held, 0, len(items))
			for _, in := range items {
				hs = append(hs, fromLive(in, w.Until))
			}
			add(hs, err)
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, fmt.Errorf("read the history: %w", errors.Join(errs...))
	}
	return slices.DeleteFunc(out, func(h Held) bool { return w.Repo != "" && h.Repo != w.Repo }), nil
}

func fromRecord(r state.RunRecord) Held {
	h := Held{Run: r.Run, Attempt: r.RunAttempt, Repo: r.Repo, InstanceID: r.InstanceID, Pool: r.Pool, Type: r.InstanceType,
		UsageClass: r.UsageClass, Claimed: r.Claimed, AssignedAt: r.AssignedAt, Registered: r.RegisteredAt, EndedAt: r.EndedAt,
		Outcome: r.Outcome, Reason: r.Reason, Seconds: r.Seconds(), Price: r.Price, Job: jobView(r.Run, r.Job, r.TookJob)}
	h.Cost, h.PriceKnown = r.Cost()
	return h
}

func fromLive(in state.Instance, now time.Time) Held {
	h := Held{Run: in.RunID, Attempt: in.RunAttempt, Repo: in.Repo, InstanceID: in.ID, Pool: in.Pool, Type: in.InstanceType,
		UsageClass: in.UsageClass, Claimed: in.Claimed, AssignedAt: in.AssignedAt, Registered: in.RegisteredAt,
		Outcome: string(in.State), Reason: in.StateReason, Price: in.Price, PriceKnown: in.PriceSource != "", Job: jobView(in.RunID, in.Job, in.TookJob)}
	if !in.AssignedAt.IsZero() && now.After(in.AssignedAt) {
		h.Seconds = now.Sub(in.AssignedAt).Seconds()
	}
	if h.PriceKnown {
		h.Cost = h.Seconds * in.Price / 3600
	}
	return h
}

// Runs returns the run attempts of the window, newest first: those that ended in it and those
// still holding instances.
func (i *Operator) Runs(ctx context.Context, w Window) ([]RunSummary, error) {
	held, err := i.held(ctx, w)
	if err != nil {
		return nil, err
	}
	type key struct {
		run     string
		attempt int
	}
	byRun := map[key]*RunSummary{}
	for _, h := range held {
		k := key{h.Run, h.Attempt}
		s := byRun[k]
		if s == nil {
			s = &RunSummary{Run: h.Run, Attempt: h.Attempt, Repo: h.Repo}
			byRun[k] = s
		}
		s.Held = append(s.Held, h)
	}
	out := make([]RunSummary, 0, len(byRun))
	for _, s := range byRun {
		summarise(s)
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b RunSummary) int {
		return cmp.Or(b.Started.Compare(a.Started), cmp.Compare(a.Run, b.Run), cmp.Compare(a.Attempt, b.Attempt))
	})
	return out, nil
}

// summarise fills a run's totals from its instances.
func summarise(s *RunSummary) {
	slices.SortFunc(s.Held, func(a, b Held) int {
		return cmp.Or(a.AssignedAt.Compare(b.AssignedAt), cmp.Compare(a.InstanceID, b.InstanceID))
	})
	var lastReg time.Time
	live, terminated := 0, map[string]int{}
	for _, h := range s.Held {
		s.Instances++
		if h.Claimed {
			s.Reused++
		} else {
			s.Created++
		}
		if !slices.Contains(s.Pools, h.Pool) {
			s.Pools = append(s.Pools, h.Pool)
		}
		if s.Started.IsZero() || (!h.AssignedAt.IsZero() && h.AssignedAt.Before(s.Started)) {
			s.Started = h.AssignedAt
		}
		if h.Registered.After(lastReg) {
			lastReg = h.Registered
		}
		switch {
		case h.EndedAt.IsZero():
			live++
		case h.Outcome == string(state.Terminated):
			terminated[h.Reason]++
		}
		if h.EndedAt.After(s.Ended) {
			s.Ended = h.EndedAt
		}
		if h.PriceKnown {
			s.Cost += h.Cost
		} else {
			s.PriceUnknown++
		}
		if h.Job != nil && (s.Job == nil || h.Job.TookJob != 0) {
			s.Job = h.Job
		}
	}
	if !lastReg.IsZero() && lastReg.After(s.Started) {
		s.ProvisionSeconds = lastReg.Sub(s.Started).Seconds()
	}
	switch {
	case live > 0:
		s.Ended = time.Time{}
		s.Outcome = "running"
	case len(terminated) == 0:
		s.Outcome = "released"
	default:
		var parts []string
		for why, n := range terminated {
			parts = append(parts, fmt.Sprintf("%d terminated (%s)", n, why))
		}
		slices.Sort(parts)
		s.Outcome = strings.Join(parts, "; ")
	}
}
