package ghfake

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The App's view of its webhook and of its installations' work, as GitHub's REST API gives it:
// the deliveries and their redelivery (the App's JWT), an installation's repositories, and a
// repository's workflow runs and their jobs (an installation token with actions: read).

func (s *Server) hookAPI(mux *http.ServeMux) {
	mux.HandleFunc("GET /app/hook/deliveries", s.asApp(s.listDeliveries))
	mux.HandleFunc("POST /app/hook/deliveries/{delivery_id}/attempts", s.asApp(s.redeliverAttempt))
	mux.HandleFunc("GET /app/installations", s.asApp(s.listInstallations))
	mux.HandleFunc("GET /installation/repositories", s.listInstallationRepositories)
	s.restNeeding(mux, "GET /repos/{owner}/{repo}/actions/runs", "actions", s.listRuns)
	s.restNeeding(mux, "GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs", "actions", s.listRunJobs)
}

// asApp serves h to requests authenticated with the App's JWT, holding s.mu.
func (s *Server) asApp(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			writeError(w, http.StatusUnauthorized, errJWT.Error())
			return
		}
		if err := s.verifyJWT(strings.TrimSpace(raw)); err != nil {
			writeError(w, http.StatusUnauthorized, err.Error())
			return
		}
		h(w, r)
	}
}

// deliveryStatus is the status GitHub lists for an attempt.
func deliveryStatus(d Delivery) string {
	switch {
	case d.Status >= 200 && d.Status < 300:
		return "OK"
	case d.Status == 0:
		return "timed out"
	}
	return fmt.Sprintf("Invalid HTTP Response: %d", d.Status)
}

// listDeliveries serves GET /app/hook/deliveries: the attempts made, newest first, paged by an
// opaque cursor in the Link header (per_page, at most 100; 30 by default). Dropped deliveries
// were never attempted and are not listed.
func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request) {
	var all []Delivery
	for i := len(s.deliveries) - 1; i >= 0; i-- {
		if d := s.deliveries[i]; !d.Dropped {
			all = append(all, d)
		}
	}
	perPage := 30
	if v, err := strconv.Atoi(r.URL.Query().Get("per_page")); err == nil && v > 0 {
		perPage = min(v, 100)
	}
	start := 0
	if c := r.URL.Query().Get("cursor"); c != "" {
		// The cursor names the last attempt of the previous page: the next page starts after it
		// (attempts made meanwhile are newer, and do not shift it).
		last, err := strconv.ParseInt(strings.TrimPrefix(c, "v1_"), 10, 64)
		if err != nil {
			writeError(w, http.StatusUnprocessableEntity, "Invalid cursor")
			return
		}
		start = len(all)
		for i, d := range all {
			if d.Num < last {
				start = i
				break
			}
		}
	}
	end := min(start+perPage, len(all))
	if end < len(all) {
		q := r.URL.Query()
		q.Set("cursor", fmt.Sprintf("v1_%d", all[end-1].Num))
		q.Set("per_page", strconv.Itoa(perPage))
		w.Header().Set("Link", fmt.Sprintf(`<http://%s%s?%s>; rel="next"`, r.Host, r.URL.Path, q.Encode()))
	}
	out := make([]map[string]any, 0, end-start)
	for _, d := range all[start:end] {
		item := map[string]any{"id": d.Num, "guid": d.ID, "delivered_at": stamp(d.At), "redelivery": d.Redelivery,
			"duration": 0.05, "status": deliveryStatus(d), "status_code": d.Status, "event": "workflow_job", "action": d.Action,
			"installation_id": nil, "repository_id": nil}
		if j := s.jobs[d.JobID]; j != nil {
			item["repository_id"] = s.RepoID(string(j.Repo))
			if in := s.installationFor(j.Repo); in != nil {
				item["installation_id"] = in.id
			}
		}
		out = append(out, item)
	}
	writeJSON(w, http.StatusOK, out)
}

// redeliverAttempt serves POST /app/hook/deliveries/{delivery_id}/attempts: the attempt's event
// is delivered again, after the deliveries already waiting (GitHub answers 202 and delivers it
// later).
func (s *Server) redeliverAttempt(w http.ResponseWriter, r *http.Request) {
	num, _ := strconv.ParseInt(r.PathValue("delivery_id"), 10, 64)
	i := slices.IndexFunc(s.deliveries, func(d Delivery) bool { return d.Num == num && num > 0 })
	if i < 0 || s.hook == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	d := s.deliveries[i]
	s.redelivered++
	s.outbox = append(s.outbox, outgoing{id: d.ID, action: d.Action, jobID: d.JobID, body: d.Body, redelivery: true})
	s.wakeDeliveries()
	writeJSON(w, http.StatusAccepted, map[string]any{})
}

// listInstallations serves GET /app/installations.
func (s *Server) listInstallations(w http.ResponseWriter, r *http.Request) {
	all := make([]*installation, 0, len(s.installs))
	for _, in := range s.installs {
		all = append(all, in)
	}
	slices.SortFunc(all, func(a, b *installation) int { return cmp.Compare(a.id, b.id) })
	start, end := s.page(w, r, len(all))
	out := make([]map[string]any, 0, end-start)
	for _, in := range all[start:end] {
		out = append(out, s.installationObject(in))
	}
	writeJSON(w, http.StatusOK, out)
}

// listInstallationRepositories serves GET /installation/repositories to an installation token:
// the repositories it was installed on, or, installed on every repository of its owner, those of
// the owner's the stand-in has seen a job of.
func (s *Server) listInstallationRepositories(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.instTokens[credential(r)]
	in := s.installationByID(t.installation)
	if !ok || !s.now().Before(t.expires) || in == nil {
		writeError(w, http.StatusUnauthorized, "Bad credentials")
		return
	}
	repos := slices.Clone(in.repos)
	if repos == nil {
		for _, j := range s.jobs {
			if strings.EqualFold(j.Repo.Org(), in.owner) && !slices.Contains(repos, string(j.Repo)) {
				repos = append(repos, string(j.Repo))
			}
		}
	}
	slices.Sort(repos)
	start, end := s.page(w, r, len(repos))
	out := make([]map[string]any, 0, end-start)
	for _, repo := range repos[start:end] {
		out = append(out, s.repository(repo))
	}
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(repos), "repositories": out})
}

// run is a workflow run as the stand-in derives it from its jobs.
type run struct {
	id      int64
	created time.Time
	status  string
	jobs    []*Job
}

// runsOf returns repository repo's runs, newest first. The caller holds s.mu.
func (s *Server) runsOf(repo Scope) []*run {
	byID := map[int64]*run{}
	for _, j := range s.jobs {
		if !strings.EqualFold(string(j.Repo), string(repo)) {
			continue
		}
		id, _ := strconv.ParseInt(j.RunID, 10, 64)
		r := byID[id]
		if r == nil {
			r = &run{id: id, created: j.CreatedAt}
			byID[id] = r
		}
		r.jobs = append(r.jobs, j)
		if j.CreatedAt.Before(r.created) {
			r.created = j.CreatedAt
		}
	}
	out := make([]*run, 0, len(byID))
	for _, r := range byID {
		queued, done := 0, 0
		for _, j := range r.jobs {
			switch j.Status {
			case "queued":
				queued++
			case "completed":
				done++
			}
		}
		switch {
		case queued == len(r.jobs):
			r.status = "queued"
		case done == len(r.jobs):
			r.status = "completed"
		default:
			r.status = "in_progress"
		}
		slices.SortFunc(r.jobs, func(a, b *Job) int { return cmp.Compare(a.ID, b.ID) })
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *run) int { return cmp.Or(b.created.Compare(a.created), cmp.Compare(b.id, a.id)) })
	return out
}

// listRuns serves GET /repos/{owner}/{repo}/actions/runs, with the status and created (>=time)
// filters.
func (s *Server) listRuns(w http.ResponseWriter, r *http.Request, repo Scope) {
	status := r.URL.Query().Get("status")
	var since time.Time
	if c := r.URL.Query().Get("created"); c != "" {
		t, err := time.Parse(time.RFC3339, strings.TrimPrefix(c, ">="))
		if err != nil {
			writeError(w, http.StatusUnprocessableEntity, "Invalid created: want >=<ISO 8601 time>")
			return
		}
		since = t
	}
	var runs []*run
	for _, x := range s.runsOf(repo) {
		if (status == "" || x.status == status) && !x.created.Before(since) {
			runs = append(runs, x)
		}
	}
	start, end := s.page(w, r, len(runs))
	out := make([]map[string]any, 0, end-start)
	for _, x := range runs[start:end] {
		out = append(out, s.workflowRun(string(repo), x))
	}
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(runs), "workflow_runs": out})
}

// listRunJobs serves GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs.
func (s *Server) listRunJobs(w http.ResponseWriter, r *http.Request, repo Scope) {
	id, _ := strconv.ParseInt(r.PathValue("run_id"), 10, 64)
	var jobs []*Job
	for _, x := range s.runsOf(repo) {
		if x.id == id {
			jobs = x.jobs
		}
	}
	if jobs == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	start, end := s.page(w, r, len(jobs))
	out := make([]map[string]any, 0, end-start)
	for _, j := range jobs[start:end] {
		out = append(out, s.job(j, j.Status))
	}
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(jobs), "jobs": out})
}

// Redelivered counts the redeliveries asked for through the REST API.
func (s *Server) Redelivered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.redelivered
}
