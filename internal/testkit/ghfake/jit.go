package ghfake

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// DefaultGroupID is the id of DefaultGroup, the only group of repository runners.
const DefaultGroupID = 1

// JITConfig is the stand-in's just-in-time runner configuration: what encoded_jit_config holds,
// base64 (standard encoding) of this JSON. Only the stand-in runner reads it (see package
// fakerunner); GitHub's own format is opaque to Hangar too.
type JITConfig struct {
	URL        string   `json:"url"` // <server>/owner/repo or <server>/org: the runner's scope
	ID         int64    `json:"id"`  // the runner's id
	Name       string   `json:"name"`
	Credential string   `json:"credential"` // authenticates the runner's requests
	Labels     []string `json:"labels"`
	Work       string   `json:"work"` // the work folder, relative to the runner's directory unless absolute
}

// Encode returns the configuration as encoded_jit_config carries it.
func (c JITConfig) Encode() string {
	b, _ := json.Marshal(c)
	return base64.StdEncoding.EncodeToString(b)
}

// DecodeJITConfig reads an encoded_jit_config the stand-in issued.
func DecodeJITConfig(encoded string) (JITConfig, error) {
	var c JITConfig
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return c, fmt.Errorf("the just-in-time configuration is not base64: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("the just-in-time configuration is not the stand-in's: %w", err)
	}
	if c.URL == "" || c.ID == 0 || c.Credential == "" {
		return c, fmt.Errorf("the just-in-time configuration lacks its url, id or credential")
	}
	return c, nil
}

// generateJITConfig serves POST .../actions/runners/generate-jitconfig: it registers a
// just-in-time runner (offline, idle, exactly the labels asked for) and returns it with its
// encoded configuration. RefuseRegistrations and RefuseRunners make it fail with 503. The caller
// holds s.mu.
func (s *Server) generateJITConfig(w http.ResponseWriter, r *http.Request, scope Scope) {
	var req struct {
		Name          string   `json:"name"`
		RunnerGroupID int64    `json:"runner_group_id"`
		Labels        []string `json:"labels"`
		WorkFolder    string   `json:"work_folder"`
	}
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	switch {
	case len(req.Name) < 1 || len(req.Name) > 64:
		writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("Invalid request.\n\nname: %q: want 1 to 64 characters.", req.Name))
		return
	case len(req.Labels) < 1 || len(req.Labels) > 100:
		writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("Invalid request.\n\nlabels: %d items: want 1 to 100.", len(req.Labels)))
		return
	case slices.Contains(req.Labels, ""):
		writeError(w, http.StatusUnprocessableEntity, "Invalid request.\n\nlabels: an empty label.")
		return
	}
	if s.refuseReg || slices.ContainsFunc(s.refuseNames, func(p string) bool { return strings.HasPrefix(req.Name, p) }) {
		writeError(w, http.StatusServiceUnavailable, "Service Unavailable (registration refused by the stand-in)")
		return
	}
	group := ""
	if scope.IsRepo() {
		if req.RunnerGroupID != DefaultGroupID {
			writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("Invalid runner group id %d: a repository has only the default runner group (%d).",
				req.RunnerGroupID, DefaultGroupID))
			return
		}
	} else {
		group = s.groupName(req.RunnerGroupID)
		if group == "" {
			writeError(w, http.StatusNotFound, fmt.Sprintf("Could not find any self-hosted runner group with id %d.", req.RunnerGroupID))
			return
		}
	}
	if slices.ContainsFunc(s.inScope(scope), func(x *Runner) bool { return x.Name == req.Name }) {
		writeError(w, http.StatusConflict, "Already exists - A runner with the name "+req.Name+" already exists.")
		return
	}
	work := req.WorkFolder
	if work == "" {
		work = "_work"
	}
	s.nextRunner++
	x := &Runner{ID: s.nextRunner, Name: req.Name, Scope: scope, Labels: slices.Clone(req.Labels), Group: group, Status: "offline",
		JIT: true, credential: randomToken("CRED")}
	s.runners[x.ID] = x
	s.registered++
	s.minted["jitconfig"]++
	cfg := JITConfig{URL: s.URL() + "/" + string(scope), ID: x.ID, Name: x.Name, Credential: x.credential, Labels: slices.Clone(x.Labels), Work: work}
	encoded := cfg.Encode()
	s.secrets = append(s.secrets, encoded, x.credential)
	writeJSON(w, http.StatusCreated, map[string]any{"runner": toAPI(x), "encoded_jit_config": encoded})
}

// groupName returns the name of runner group id, or "". The caller holds s.mu.
func (s *Server) groupName(id int64) string {
	for name, gid := range s.groupIDs {
		if gid == id {
			return name
		}
	}
	return ""
}

// apiRunnerGroup is a runner group as GitHub's REST API shows it.
type apiRunnerGroup struct {
	ID                       int64  `json:"id"`
	Name                     string `json:"name"`
	Visibility               string `json:"visibility"`
	Default                  bool   `json:"default"`
	RunnersURL               string `json:"runners_url"`
	SelectedRepositoriesURL  string `json:"selected_repositories_url,omitempty"`
	Inherited                bool   `json:"inherited"`
	AllowsPublicRepositories bool   `json:"allows_public_repositories"`
	RestrictedToWorkflows    bool   `json:"restricted_to_workflows"`
}

// apiGroup is runner group name as GitHub's REST API shows it. The caller holds s.mu.
func (s *Server) apiGroup(scope Scope, name string) apiRunnerGroup {
	base := s.URL() + "/orgs/" + string(scope) + "/actions/runner-groups/"
	id := s.groupIDs[name]
	g := apiRunnerGroup{ID: id, Name: name, Visibility: "all", Default: id == DefaultGroupID,
		RunnersURL: fmt.Sprintf("%s%d/runners", base, id)}
	if id != DefaultGroupID {
		g.Visibility = "selected"
		g.SelectedRepositoriesURL = fmt.Sprintf("%s%d/repositories", base, id)
	}
	return g
}

// createRunnerGroup serves POST /orgs/{org}/actions/runner-groups: a group open to the selected
// repositories (visibility selected; all and private are not modelled). A name taken answers
// 409. The caller holds s.mu.
func (s *Server) createRunnerGroup(w http.ResponseWriter, r *http.Request, scope Scope) {
	var req struct {
		Name                  string  `json:"name"`
		Visibility            string  `json:"visibility"`
		SelectedRepositoryIDs []int64 `json:"selected_repository_ids"`
	}
	if err := decode(r, &req); err != nil || req.Name == "" {
		writeError(w, http.StatusUnprocessableEntity, "Invalid request: name is required")
		return
	}
	if req.Visibility != "selected" {
		writeError(w, http.StatusUnprocessableEntity, "the stand-in makes only groups of visibility selected")
		return
	}
	if _, ok := s.groupIDs[req.Name]; ok {
		writeError(w, http.StatusConflict, "Name has already been taken")
		return
	}
	var repos []string
	for _, id := range req.SelectedRepositoryIDs {
		repo := s.repoName(id)
		if repo == "" || !strings.EqualFold(Scope(repo).Org(), string(scope)) {
			writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("repository %d is not a repository of %s", id, scope))
			return
		}
		repos = append(repos, repo)
	}
	s.groups[req.Name] = repos
	s.groupSeq++
	s.groupIDs[req.Name] = s.groupSeq
	s.groupsMade++
	writeJSON(w, http.StatusCreated, s.apiGroup(scope, req.Name))
}

// listGroupRepositories serves GET /orgs/{org}/actions/runner-groups/{id}/repositories. The
// caller holds s.mu.
func (s *Server) listGroupRepositories(w http.ResponseWriter, r *http.Request, _ Scope) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	name := s.groupName(id)
	if name == "" || id == DefaultGroupID {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	repos := s.groups[name]
	start, end := s.page(w, r, len(repos))
	out := make([]map[string]any, 0, end-start)
	for _, repo := range repos[start:end] {
		out = append(out, s.repository(repo))
	}
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(repos), "repositories": out})
}

// listRunnerGroups serves GET /orgs/{org}/actions/runner-groups: the default group (id 1, open
// to every repository) and the groups SetGroup made, by id. Groups are the stand-in's, not an
// organisation's: every organisation lists them all. The caller holds s.mu.
func (s *Server) listRunnerGroups(w http.ResponseWriter, r *http.Request, scope Scope) {
	names := make([]string, 0, len(s.groupIDs))
	for name := range s.groupIDs {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return int(s.groupIDs[a] - s.groupIDs[b]) })
	start, end := s.page(w, r, len(names))
	out := make([]apiRunnerGroup, 0, end-start)
	for _, name := range names[start:end] {
		out = append(out, s.apiGroup(scope, name))
	}
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(names), "runner_groups": out})
}
