package jobs

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// Why a job is not routed, as the JobsUnrouted metric's Reason dimension names it.
const (
	ReasonUnknown      = "unknown"      // its labels name no pool
	ReasonAmbiguous    = "ambiguous"    // they name two or more pools equally
	ReasonRepository   = "repository"   // the pool does not allow the job's repository
	ReasonInstallation = "installation" // the delivery came through an installation the stack does not serve
)

// AdmitReason is the Reason dimension of a pooldoc.Document.Admits refusal.
func AdmitReason(err error) string {
	if errors.Is(err, pooldoc.ErrInstallation) {
		return ReasonInstallation
	}
	return ReasonRepository
}

// ErrNotOurs is returned by Route for a job without the stack label: it is meant for other
// runners, and is ignored without a word.
var ErrNotOurs = errors.New("the job does not carry the stack label")

// RouteError says why a job of the stack's has no pool.
type RouteError struct {
	Reason string   // ReasonUnknown or ReasonAmbiguous
	Labels []string // the job's labels
	Pools  []string // the pools that tie (ambiguous)
}

func (e *RouteError) Error() string {
	if e.Reason == ReasonAmbiguous {
		return fmt.Sprintf("labels %v name pools %s equally: add a label that tells them apart", e.Labels, strings.Join(e.Pools, " and "))
	}
	return fmt.Sprintf("labels %v name no pool: want the stack label and the labels of one pool", e.Labels)
}

// Router routes jobs to the pools of one stack that serve label-routed jobs.
type Router struct {
	stackLabel string
	pools      []routed
}

type routed struct {
	doc    *pooldoc.Document
	labels []string // lower case, sorted
}

// NewRouter builds the router of a stack's pools; pools without jobs settings serve no
// label-routed job. Every pool that does must name the same stack label, and no two may have the
// same labels (the stack's configuration refuses both before they get here).
func NewRouter(pools []*pooldoc.Document) (*Router, error) {
	r := &Router{}
	for _, d := range pools {
		if d.Jobs == nil {
			continue
		}
		if r.stackLabel == "" {
			r.stackLabel = d.Jobs.StackLabel
		} else if !strings.EqualFold(r.stackLabel, d.Jobs.StackLabel) {
			return nil, fmt.Errorf("pool %s: stack label %q: the other pools have %q; every pool of a stack has the same", d.Name, d.Jobs.StackLabel, r.stackLabel)
		}
		p := routed{doc: d, labels: fold(d.Jobs.Labels)}
		for _, o := range r.pools {
			if slices.Equal(o.labels, p.labels) {
				return nil, fmt.Errorf("pools %s and %s have the same labels %v: no job could tell them apart", o.doc.Name, d.Name, d.Jobs.Labels)
			}
		}
		r.pools = append(r.pools, p)
	}
	return r, nil
}

// Serves reports whether any pool serves label-routed jobs.
func (r *Router) Serves() bool { return len(r.pools) > 0 }

// Trusted says why no pool of the stack admits a job of repository repo delivered through
// installation (pooldoc.Document.Admits): nil when one does. It judges the deliveries of jobs
// that are not routed by their labels (a runner of the stack's took them).
func (r *Router) Trusted(repo string, installation int64) error {
	err := fmt.Errorf("%w: no pool serves label-routed jobs", pooldoc.ErrRepository)
	for _, p := range r.pools {
		if err = p.doc.Admits(repo, installation); err == nil {
			return nil
		}
	}
	return err
}

// Admit returns the pool that serves a queued job of repository repo, delivered through App
// installation installation, with these labels: ErrNotOurs without the stack label; the trust
// set's refusal (pooldoc.ErrInstallation, pooldoc.ErrRepository) before any routing, so that the
// outside cannot count as unrouted; a *RouteError when the labels name no pool or two. The
// webhook and the dispatcher's sweep both admit queued jobs through it.
func (r *Router) Admit(repo string, installation int64, labels []string) (*pooldoc.Document, error) {
	if !r.Ours(labels) {
		return nil, ErrNotOurs
	}
	if err := r.Trusted(repo, installation); err != nil {
		return nil, err
	}
	pool, err := r.Route(labels)
	if err != nil {
		return nil, err
	}
	if err := pool.Admits(repo, installation); err != nil {
		return nil, err
	}
	return pool, nil
}

// StackLabel is the label every job of the stack carries.
func (r *Router) StackLabel() string { return r.stackLabel }

// Ours reports whether a job with these labels is the stack's (carries the stack label).
func (r *Router) Ours(labels []string) bool {
	return r.stackLabel != "" && slices.ContainsFunc(labels, func(l string) bool { return strings.EqualFold(l, r.stackLabel) })
}

// Route returns the pool that serves a job with these labels (docs/labels.md, "Labels and
// routing"): ErrNotOurs without the stack label, a *RouteError when they name no pool or two.
func (r *Router) Route(labels []string) (*pooldoc.Document, error) {
	if !r.Ours(labels) {
		return nil, ErrNotOurs
	}
	want := fold(slices.DeleteFunc(slices.Clone(labels), func(l string) bool {
		return strings.EqualFold(l, r.stackLabel) || strings.EqualFold(l, names.SelfHostedLabel)
	}))
	if len(want) == 0 {
		return nil, &RouteError{Reason: ReasonUnknown, Labels: labels}
	}
	var best []routed
	for _, p := range r.pools {
		if slices.Equal(p.labels, want) {
			return p.doc, nil // exact
		}
		if !covers(p.labels, want) {
			continue
		}
		switch {
		case len(best) == 0 || len(p.labels) < len(best[0].labels):
			best = []routed{p}
		case len(p.labels) == len(best[0].labels):
			best = append(best, p)
		}
	}
	switch len(best) {
	case 0:
		return nil, &RouteError{Reason: ReasonUnknown, Labels: labels}
	case 1:
		return best[0].doc, nil
	}
	names := make([]string, len(best))
	for i, p := range best {
		names[i] = p.doc.Name
	}
	return nil, &RouteError{Reason: ReasonAmbiguous, Labels: labels, Pools: names}
}

// fold returns labels in lower case, sorted, without repeats: labels compare without regard to
// case, as GitHub compares them.
func fold(labels []string) []string {
	out := make([]string, 0, len(labels))
	for _, l := range labels {
		out = append(out, strings.ToLower(l))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// covers reports whether have (sorted) holds every label of want (sorted).
func covers(have, want []string) bool {
	for _, w := range want {
		if _, ok := slices.BinarySearch(have, w); !ok {
			return false
		}
	}
	return true
}
