package ghfake

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	for _, base := range []string{"/repos/{owner}/{repo}", "/orgs/{owner}"} {
		s.rest(mux, "POST "+base+"/actions/runners/registration-token", s.createToken("registration"))
		s.rest(mux, "GET "+base+"/actions/runners", s.listRunners)
		s.rest(mux, "GET "+base+"/actions/runners/{id}", s.getRunner)
		s.rest(mux, "DELETE "+base+"/actions/runners/{id}", s.deleteRunner)
		s.rest(mux, "GET "+base+"/actions/runners/{id}/labels", s.labels("get"))
		s.rest(mux, "POST "+base+"/actions/runners/{id}/labels", s.labels("add"))
		s.rest(mux, "PUT "+base+"/actions/runners/{id}/labels", s.labels("set"))
		s.rest(mux, "DELETE "+base+"/actions/runners/{id}/labels", s.labels("clear"))
		s.rest(mux, "DELETE "+base+"/actions/runners/{id}/labels/{name}", s.labels("remove"))
		s.rest(mux, "POST "+base+"/actions/runners/generate-jitconfig", s.generateJITConfig)
	}
	s.rest(mux, "GET /orgs/{owner}/actions/runner-groups", s.listRunnerGroups)
	s.rest(mux, "POST /orgs/{owner}/actions/runner-groups", s.createRunnerGroup)
	s.rest(mux, "GET /orgs/{owner}/actions/runner-groups/{id}/repositories", s.listGroupRepositories)
	mux.HandleFunc("POST /app/installations/{installation_id}/access_tokens", s.createInstallationToken)
	s.hookAPI(mux)
	s.manifestFlow(mux)
	s.runnerSide(mux)
	s.jobControl(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// An enterprise server serves its API under /api/v3 (the API URL a stack pinned to it
		// gives its dispatcher); the stand-in serves it there too, as at its root.
		if rest, ok := strings.CutPrefix(r.URL.Path, apiPrefix); ok {
			r.URL.Path, r.URL.RawPath = "/"+rest, ""
		}
		s.requests[kindOf(r)].Add(1)
		s.held(r)
		mux.ServeHTTP(w, r)
	})
}

// apiPrefix is where an enterprise server serves its REST API.
const apiPrefix = "/api/v3/"

// rest registers a REST handler authenticated by an admin token or an installation token of the
// App (see authorize).
func (s *Server) rest(mux *http.ServeMux, pattern string, h func(http.ResponseWriter, *http.Request, Scope)) {
	s.restNeeding(mux, pattern, "", h)
}

// restNeeding registers a REST handler as rest does, whose installation tokens need permission
// need ("" for the runner permission of the scope: administration or
// organization_self_hosted_runners).
func (s *Server) restNeeding(mux *http.ServeMux, pattern, need string, h func(http.ResponseWriter, *http.Request, Scope)) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		scope := Scope(r.PathValue("owner"))
		if repo := r.PathValue("repo"); repo != "" {
			scope = Scope(r.PathValue("owner") + "/" + repo)
		}
		if !s.authorize(w, r, scope, need) {
			return
		}
		if !scope.IsRepo() {
			s.orgs[strings.ToLower(string(scope))] = true // only organisations have /orgs/ endpoints
		}
		h(w, r, scope)
	})
}

// authorize accepts an admin token, or an unexpired installation token of an installation that
// covers scope; otherwise it writes 401 and returns false. The caller holds s.mu.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, scope Scope, need string) bool {
	cred := credential(r)
	if cred != "" && s.admin[cred] {
		return true
	}
	t, ok := s.instTokens[cred]
	if cred == "" || !ok || !s.now().Before(t.expires) {
		writeError(w, http.StatusUnauthorized, "Bad credentials")
		return false
	}
	in := s.installationByID(t.installation)
	if in == nil || !in.covers(scope) {
		writeError(w, http.StatusUnauthorized, "Resource not accessible by integration")
		return false
	}
	switch {
	case need != "":
	case scope.IsRepo():
		need = "administration" // a repository's self-hosted runners
	default:
		need = "organization_self_hosted_runners"
	}
	if in.withheld[need] {
		writeError(w, http.StatusForbidden, "Resource not accessible by integration")
		return false
	}
	return true
}

// page returns the slice bounds of the page r asks for (per_page, page; the server's page size by
// default) of n items, and sets the Link header to the next page when there is one.
func (s *Server) page(w http.ResponseWriter, r *http.Request, n int) (start, end int) {
	perPage, page := s.perPage, 1
	if v, err := strconv.Atoi(r.URL.Query().Get("per_page")); err == nil && v > 0 {
		perPage = min(v, 100)
	}
	if v, err := strconv.Atoi(r.URL.Query().Get("page")); err == nil && v > 0 {
		page = v
	}
	start = min((page-1)*perPage, n)
	end = min(start+perPage, n)
	if end < n {
		q := r.URL.Query()
		q.Set("page", strconv.Itoa(page+1))
		q.Set("per_page", strconv.Itoa(perPage))
		w.Header().Set("Link", fmt.Sprintf(`<http://%s%s?%s>; rel="next"`, r.Host, r.URL.Path, q.Encode()))
	}
	return start, end
}

func (s *Server) createToken(kind string) func(http.ResponseWriter, *http.Request, Scope) {
	return func(w http.ResponseWriter, _ *http.Request, scope Scope) {
		t, exp := s.issue(scope, kind)
		writeJSON(w, http.StatusCreated, map[string]string{"token": t, "expires_at": exp.Format("2006-01-02T15:04:05Z07:00")})
	}
}

type apiLabel struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
	Type string `json:"type"`
}

type apiRunner struct {
	ID     int64      `json:"id"`
	Name   string     `json:"name"`
	OS     string     `json:"os"`
	Status string     `json:"status"`
	Busy   bool       `json:"busy"`
	Labels []apiLabel `json:"labels"`
}

func toAPI(r *Runner) apiRunner {
	labels := make([]apiLabel, len(r.Labels))
	for i, l := range r.Labels {
		labels[i] = apiLabel{ID: int64(i + 1), Name: l, Type: "custom"}
	}
	return apiRunner{ID: r.ID, Name: r.Name, OS: "linux", Status: r.Status, Busy: r.Busy, Labels: labels}
}

// inScope returns the runners registered exactly in scope, by id.
func (s *Server) inScope(scope Scope) []*Runner {
	var out []*Runner
	for _, r := range s.runners {
		if strings.EqualFold(string(r.Scope), string(scope)) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *Runner) int { return int(a.ID - b.ID) })
	return out
}

func (s *Server) listRunners(w http.ResponseWriter, r *http.Request, scope Scope) {
	all := s.inScope(scope)
	if name := r.URL.Query().Get("name"); name != "" {
		all = slices.DeleteFunc(all, func(x *Runner) bool { return x.Name != name })
	}
	start, end := s.page(w, r, len(all))
	out := make([]apiRunner, 0, end-start)
	for _, x := range all[start:end] {
		out = append(out, toAPI(x))
	}
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(all), "runners": out})
}

// find returns the runner {id} of scope, or writes 404.
func (s *Server) find(w http.ResponseWriter, r *http.Request, scope Scope) *Runner {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if x, ok := s.runners[id]; err == nil && ok && strings.EqualFold(string(x.Scope), string(scope)) {
		return x
	}
	writeError(w, http.StatusNotFound, "Not Found")
	return nil
}

func (s *Server) getRunner(w http.ResponseWriter, r *http.Request, scope Scope) {
	if x := s.find(w, r, scope); x != nil {
		writeJSON(w, http.StatusOK, toAPI(x))
	}
}

// deleteRunner removes a runner, unless it is running a job: GitHub refuses that with 422.
func (s *Server) deleteRunner(w http.ResponseWriter, r *http.Request, scope Scope) {
	if x := s.find(w, r, scope); x != nil {
		if x.Busy {
			writeError(w, http.StatusUnprocessableEntity, "Bad request - Runner \""+x.Name+"\" is still running a job\"")
			return
		}
		delete(s.runners, x.ID)
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) labels(op string) func(http.ResponseWriter, *http.Request, Scope) {
	return func(w http.ResponseWriter, r *http.Request, scope Scope) {
		x := s.find(w, r, scope)
		if x == nil {
			return
		}
		var body struct {
			Labels []string `json:"labels"`
		}
		if op == "add" || op == "set" {
			if err := decode(r, &body); err != nil || len(body.Labels) == 0 {
				writeError(w, http.StatusUnprocessableEntity, "labels: want a non-empty list")
				return
			}
		}
		switch op {
		case "add":
			for _, l := range body.Labels {
				if !slices.Contains(x.Labels, l) {
					x.Labels = append(x.Labels, l)
				}
			}
		case "set":
			x.Labels = slices.Clone(body.Labels)
		case "clear":
			x.Labels = nil
		case "remove":
			name := r.PathValue("name")
			if !slices.Contains(x.Labels, name) {
				writeError(w, http.StatusNotFound, "label not found")
				return
			}
			x.Labels = slices.DeleteFunc(x.Labels, func(l string) bool { return l == name })
		}
		labels := toAPI(x).Labels
		writeJSON(w, http.StatusOK, map[string]any{"total_count": len(labels), "labels": labels})
	}
}
