package ghfake

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RegisterRequest is what the stand-in config.sh sends.
type RegisterRequest struct {
	URL     string   `json:"url"` // <server>/owner/repo or <server>/org
	Token   string   `json:"token"`
	Name    string   `json:"name"`
	Labels  []string `json:"labels"`
	Replace bool     `json:"replace"`
	Group   string   `json:"group,omitempty"` // --runnergroup (org scope)
}

// RegisterResponse is what it gets back.
type RegisterResponse struct {
	ID         int64  `json:"id"`
	Credential string `json:"credential"`
}

// JobAssignment is a job handed to a runner.
type JobAssignment struct {
	ID      int64  `json:"id"`
	Repo    string `json:"repo"`
	RunID   string `json:"runId"`
	Command string `json:"command"`
}

// JobResult is what a runner reports for a job.
type JobResult struct {
	Conclusion string `json:"conclusion"`
	Output     string `json:"output"`
}

func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// scopeOf returns the scope a runner URL names.
func scopeOf(raw string) (Scope, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("url %q: want <server>/owner/repo or <server>/org", raw)
	}
	p := strings.Trim(u.Path, "/")
	if p == "" || strings.Count(p, "/") > 1 {
		return "", fmt.Errorf("url %q: want <server>/owner/repo or <server>/org", raw)
	}
	return Scope(p), nil
}

// decodeScoped decodes a runner-side request into v and returns the scope of the URL url gives
// (read after decoding); on failure it has written a 400.
func decodeScoped(w http.ResponseWriter, r *http.Request, v any, url func() string) (Scope, bool) {
	if err := decode(r, v); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return "", false
	}
	scope, err := scopeOf(url())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return "", false
	}
	return scope, true
}

func (s *Server) runnerSide(mux *http.ServeMux) {
	mux.HandleFunc("POST /_fake/register", func(w http.ResponseWriter, r *http.Request) {
		var req RegisterRequest
		scope, ok := decodeScoped(w, r, &req, func() string { return req.URL })
		if !ok {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.refuseReg || slices.ContainsFunc(s.refuseNames, func(p string) bool { return strings.HasPrefix(req.Name, p) }) {
			writeError(w, http.StatusNotFound, "http response code: NotFound from 'POST "+req.URL+"' (registration refused)")
			return
		}
		if err := s.check(req.Token, "registration", scope); err != nil {
			writeError(w, http.StatusNotFound, err.Error())
			return
		}
		for _, x := range s.inScope(scope) {
			if x.Name == req.Name {
				if !req.Replace {
					writeError(w, http.StatusConflict, "A runner exists with the same name "+req.Name)
					return
				}
				delete(s.runners, x.ID)
			}
		}
		group := req.Group
		if !scope.IsRepo() {
			if group == "" {
				group = DefaultGroup
			}
			if _, ok := s.groups[group]; !ok && group != DefaultGroup {
				writeError(w, http.StatusNotFound, "Could not find any self-hosted runner group named \""+group+"\".")
				return
			}
		} else if group != "" {
			writeError(w, http.StatusBadRequest, "runner groups exist only for organisation runners")
			return
		}
		s.nextRunner++
		x := &Runner{ID: s.nextRunner, Name: req.Name, Scope: scope, Labels: slices.Clone(req.Labels), Group: group, Status: "offline",
			credential: randomToken("CRED")}
		s.runners[x.ID] = x
		s.registered++
		writeJSON(w, http.StatusCreated, RegisterResponse{ID: x.ID, Credential: x.credential})
	})

	mux.HandleFunc("POST /_fake/runners/{id}/status", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Status string `json:"status"`
		}
		if err := decode(r, &body); err != nil || (body.Status != "online" && body.Status != "offline") {
			writeError(w, http.StatusBadRequest, "status: want online or offline")
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		x := s.authRunner(w, r)
		if x == nil {
			return
		}
		if body.Status == "online" {
			if x.JIT && x.sessions > 0 {
				writeError(w, http.StatusConflict, fmt.Sprintf("A session for this runner already exists: the just-in-time runner %s has opened its one session; "+
					"a just-in-time configuration runs once", x.Name))
				return
			}
			x.sessions++
		}
		x.Status = body.Status
		w.WriteHeader(http.StatusNoContent)
	})

	mux.HandleFunc("POST /_fake/runners/{id}/next", s.nextJob)

	mux.HandleFunc("POST /_fake/runners/{id}/jobs/{job}", func(w http.ResponseWriter, r *http.Request) {
		var res JobResult
		if err := decode(r, &res); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		x := s.authRunner(w, r)
		if x == nil {
			return
		}
		j := s.runningOn(w, r, x)
		if j == nil {
			return
		}
		conclusion := res.Conclusion
		if j.cancel {
			conclusion = "cancelled"
		}
		s.complete(j, conclusion, res.Output)
		x.Busy = false
		if x.JIT {
			delete(s.runners, x.ID) // GitHub removes an ephemeral runner after its job
		}
		w.WriteHeader(http.StatusNoContent)
	})

	mux.HandleFunc("POST /_fake/runners/{id}/jobs/{job}/heartbeat", s.heartbeat)
}

// runningOn returns the job {job} that runner x is running, or writes 404. The caller holds s.mu.
func (s *Server) runningOn(w http.ResponseWriter, r *http.Request, x *Runner) *Job {
	id, _ := strconv.ParseInt(r.PathValue("job"), 10, 64)
	j, ok := s.jobs[id]
	if !ok || j.RunnerID != x.ID || j.Status != "in_progress" {
		writeError(w, http.StatusNotFound, "no such job in progress on this runner")
		return nil
	}
	return j
}

// authRunner returns the runner {id} whose credential the request carries, or writes 401/404.
// The caller holds s.mu.
func (s *Server) authRunner(w http.ResponseWriter, r *http.Request) *Runner {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	x, ok := s.runners[id]
	if !ok {
		writeError(w, http.StatusNotFound, "runner not registered")
		return nil
	}
	if r.Header.Get("Authorization") != "Runner "+x.credential {
		writeError(w, http.StatusUnauthorized, "bad runner credential")
		return nil
	}
	return x
}

// nextJob hands an online runner the oldest queued job it can take (same repository, or its
// organisation; every job label among the runner's labels), waiting up to a second for one. A
// just-in-time runner takes one job only.
func (s *Server) nextJob(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	for {
		s.mu.Lock()
		x := s.authRunner(w, r)
		if x == nil {
			s.mu.Unlock()
			return
		}
		var pick *Job
		for _, j := range s.jobs {
			if x.JIT && x.tookJob {
				break
			}
			if j.Status == "queued" && x.Scope.covers(j.Repo) && s.groupAllows(x, j.Repo) && subset(j.Labels, x.Labels) && (pick == nil || j.ID < pick.ID) {
				pick = j
			}
		}
		if pick != nil {
			s.start(pick, x)
			s.mu.Unlock()
			writeJSON(w, http.StatusOK, JobAssignment{ID: pick.ID, Repo: string(pick.Repo), RunID: pick.RunID, Command: pick.Command})
			return
		}
		wake := s.jobWaiters
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			w.WriteHeader(http.StatusNoContent)
			return
		case <-wake:
		}
	}
}

func subset(want, have []string) bool {
	for _, l := range want {
		if !slices.ContainsFunc(have, func(h string) bool { return strings.EqualFold(h, l) }) {
			return false
		}
	}
	return true
}

// DefaultGroup is the organisation's default runner group: open to every repository.
const DefaultGroup = "Default"

// SetGroup creates (or changes) an organisation runner group open only to repos, as an
// organisation owner would for a group limited to selected repositories. Groups get ids 2, 3, …
// in creation order (the REST API's runner_group_id; DefaultGroup is 1).
func (s *Server) SetGroup(name string, repos ...string) {
	for _, r := range repos {
		s.RepoID(r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groups[name] = slices.Clone(repos)
	if _, ok := s.groupIDs[name]; !ok {
		s.groupSeq++
		s.groupIDs[name] = s.groupSeq
	}
}

// groupAllows reports whether an organisation runner's group lets repo's jobs use it.
func (s *Server) groupAllows(x *Runner, repo Scope) bool {
	if x.Scope.IsRepo() || x.Group == DefaultGroup {
		return true
	}
	return slices.ContainsFunc(s.groups[x.Group], func(r string) bool { return strings.EqualFold(r, string(repo)) })
}

// Group returns the repositories runner group name is open to, and whether the stand-in has it.
func (s *Server) Group(name string) ([]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	repos, ok := s.groups[name]
	return slices.Clone(repos), ok
}

// GroupsMade returns how many runner groups were made through the REST API.
func (s *Server) GroupsMade() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.groupsMade
}
