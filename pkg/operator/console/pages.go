package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/pkg/operator"
)

// page is what every template receives: the stack, the page's name for the navigation, when
// it was read, and the page's own data.
type page struct {
	Stack  string
	Active string
	ReadAt time.Time
	Data   any
}

// render writes a page, whole: it is rendered before anything is sent, so a template that fails
// is a 500, never half a page.
func (c *Console) render(w http.ResponseWriter, status int, name string, data any) {
	var b bytes.Buffer
	p := page{Stack: c.cfg.Stack, Active: name, ReadAt: c.cfg.Now().UTC(), Data: data}
	if err := c.pages[name].ExecuteTemplate(&b, "base", p); err != nil {
		c.cfg.Log.Error("hangar ui: render page", "page", name, "error", err)
		http.Error(w, "hangar ui could not render the page "+name+": its log says why", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// problem is a page that says what went wrong, and what to do.
func (c *Console) problem(w http.ResponseWriter, _ *http.Request, status int, msg string) {
	c.render(w, status, pageProblem, struct {
		Status int
		Text   string
		Detail string
	}{status, http.StatusText(status), msg})
}

// failed answers a read that failed: the operator's bad input (an unknown pool or instance, a
// malformed filter) is 400 or 404 with the message naming it; anything else is 502, the stack's
// AWS services having failed the read.
func (c *Console) failed(w http.ResponseWriter, r *http.Request, what string, err error) {
	switch {
	case errors.Is(err, operator.ErrUnknown):
		c.problem(w, r, http.StatusNotFound, err.Error())
	case errors.Is(err, operator.ErrBadInput):
		c.problem(w, r, http.StatusBadRequest, err.Error())
	default:
		c.cfg.Log.Warn("hangar ui: read failed", "page", r.URL.Path, "error", err)
		c.problem(w, r, http.StatusBadGateway, fmt.Sprintf("could not read %s: %v", what, err))
	}
}

func (c *Console) readCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), c.cfg.ReadTimeout)
}

// poolView is one pool on the pools page: its status and the bar of its instances by state.
type poolView struct {
	operator.PoolStatus
	Bar []segment
}

// poolBarWidth is the width, in SVG units, of a pool's bar of instances by state.
const poolBarWidth = 480.0

func (c *Console) poolsPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.readCtx(r)
	defer cancel()
	st, err := c.view.Status(ctx)
	if err != nil {
		c.failed(w, r, "the pools", err)
		return
	}
	views := make([]poolView, len(st))
	for k, p := range st {
		views[k] = poolView{PoolStatus: p, Bar: stateBar(p)}
	}
	c.render(w, http.StatusOK, pagePools, views)
}

// stateBar splits a pool's bar among its instances' states, in proportion.
func stateBar(p operator.PoolStatus) []segment {
	parts := []struct {
		class string
		n     int
	}{{"idle", p.Idle}, {"stopped", p.Stopped}, {"warming", p.Warming}, {"booting", p.Booting}, {"claimed", p.Claimed}, {"running", p.Running}}
	total := 0
	for _, s := range parts {
		total += s.n
	}
	if total == 0 {
		return nil
	}
	var out []segment
	x := 0.0
	for _, s := range parts {
		if s.n == 0 {
			continue
		}
		wd := float64(s.n) / float64(total) * poolBarWidth
		out = append(out, segment{Class: s.class, X: x, W: wd, Title: fmt.Sprintf("%d %s", s.n, s.class)})
		x += wd
	}
	return out
}

// filter is the window a history page reads: its form's values, as given, and as parsed.
type filter struct {
	Since, Repo, By string
	Window          operator.Window
	SinceChoices    []string
	ByChoices       []string
}

func (c *Console) filter(r *http.Request, defSince string) (filter, error) {
	q := r.URL.Query()
	f := filter{Since: q.Get("since"), Repo: strings.TrimSpace(q.Get("repo")), By: q.Get("by"),
		SinceChoices: []string{"1d", "7d", "30d", "90d"}, ByChoices: []string{operator.ByRepository, operator.ByPool, operator.ByRun, operator.ByDay}}
	if f.Since == "" {
		f.Since = defSince
	}
	var err error
	f.Window, err = operator.NewWindow(f.Since, f.Repo, nil, c.cfg.Now())
	return f, err
}

// runView is one run on the runs page.
type runView struct {
	operator.RunSummary
	Timeline timeline
}

func (c *Console) runsPage(w http.ResponseWriter, r *http.Request) {
	f, err := c.filter(r, "7d")
	if err != nil {
		c.failed(w, r, "the runs", err)
		return
	}
	ctx, cancel := c.readCtx(r)
	defer cancel()
	runs, err := c.view.Runs(ctx, f.Window)
	if err != nil {
		c.failed(w, r, "the runs", err)
		return
	}
	more := max(len(runs)-c.cfg.RunsLimit, 0)
	runs = runs[:len(runs)-more]
	now := c.cfg.Now()
	views := make([]runView, len(runs))
	for k, run := range runs {
		views[k] = runView{RunSummary: run, Timeline: newTimeline(run, now)}
	}
	c.render(w, http.StatusOK, pageRuns, struct {
		Filter filter
		Runs   []runView
		More   int
	}{f, views, more})
}

func (c *Console) instancePage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.readCtx(r)
	defer cancel()
	rep, err := c.view.Instance(ctx, r.PathValue("id"))
	if err != nil {
		c.failed(w, r, "the instance", err)
		return
	}
	c.render(w, http.StatusOK, pageInstance, rep)
}

func (c *Console) costPage(w http.ResponseWriter, r *http.Request) {
	f, err := c.filter(r, "30d")
	if err != nil {
		c.failed(w, r, "the cost", err)
		return
	}
	if f.By == "" {
		f.By = operator.ByRepository
	}
	ctx, cancel := c.readCtx(r)
	defer cancel()
	rows, err := c.view.Cost(ctx, f.By, f.Window)
	if err != nil {
		c.failed(w, r, "the cost", err)
		return
	}
	var total float64
	unknown := 0.0
	for _, row := range rows {
		total += row.Cost
		unknown += row.UnknownHours
	}
	c.render(w, http.StatusOK, pageCost, struct {
		Filter       filter
		Rows         []operator.CostRow
		Chart        chart
		Total        string
		UnknownHours float64
	}{f, rows, newChart(rows), operator.Dollars(total), unknown})
}

// byLink is the cost page's address grouped by by, keeping the window.
func byLink(f filter, by string) string {
	q := url.Values{"by": {by}, "since": {f.Since}}
	if f.Repo != "" {
		q.Set("repo", f.Repo)
	}
	return "/cost?" + q.Encode()
}
