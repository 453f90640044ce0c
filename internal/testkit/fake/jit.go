package fake

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
)

// GitHubError returns an error as ghclient returns GitHub's answer with status code, for Inject:
// ghapi's classification (IsNotFound, IsBusy, IsRetryable…) sees it as it would GitHub's.
func GitHubError(code int, message string) error {
	return &ghapi.Error{Status: code, Err: fmt.Errorf("GitHub answered %d: %s", code, message)}
}

// GenerateJITConfig registers a just-in-time runner (offline) and returns a configuration that
// names it; a name taken already answers 409, as GitHub does.
func (g *GitHub) GenerateJITConfig(_ context.Context, r ghapi.JITRequest) (ghapi.JIT, error) {
	if err := g.call("GenerateJITConfig"); err != nil {
		return ghapi.JIT{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if slices.ContainsFunc(g.runners, func(x ghapi.Runner) bool { return x.Name == r.Name }) {
		return ghapi.JIT{}, GitHubError(http.StatusConflict, "Already exists - A runner with the name "+r.Name+" already exists.")
	}
	g.nextID++
	g.runners = append(g.runners, ghapi.Runner{ID: g.nextID, Name: r.Name, Status: "offline", Labels: slices.Clone(r.Labels)})
	return ghapi.JIT{RunnerID: g.nextID, Config: fmt.Sprintf("JITCONFIG-%d-%s", g.nextID, r.Name)}, nil
}

// CanMakeRunners answers as an installation that may make runners, unless an error is injected
// for it (a refused token, a missing permission).
func (g *GitHub) CanMakeRunners(context.Context) error { return g.call("CanMakeRunners") }

// RepositoryGroup makes (or finds) the runner group name for repository repoID: ids 2, 3, … in
// the order made. A name asked for another repository answers ghapi.ErrGroupNotOwn.
func (g *GitHub) RepositoryGroup(_ context.Context, name string, repoID int64) (int64, error) {
	if err := g.call("RepositoryGroup"); err != nil {
		return 0, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.groups == nil {
		g.groups = map[string]fakeGroup{}
	}
	grp, ok := g.groups[name]
	switch {
	case !ok:
		grp = fakeGroup{id: int64(2 + len(g.groups)), repo: repoID}
		g.groups[name] = grp
	case grp.repo != repoID:
		return 0, fmt.Errorf("runner group %q is repository %d's: %w", name, grp.repo, ghapi.ErrGroupNotOwn)
	}
	return grp.id, nil
}

// Groups returns the runner groups made, by name, with the repository each is open to.
func (g *GitHub) Groups() map[string]int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]int64, len(g.groups))
	for name, grp := range g.groups {
		out[name] = grp.repo
	}
	return out
}

// RunnerByName returns the runner named name, or a 404.
func (g *GitHub) RunnerByName(_ context.Context, name string) (ghapi.Runner, error) {
	if err := g.call("RunnerByName"); err != nil {
		return ghapi.Runner{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range g.runners {
		if r.Name == name {
			return r, nil
		}
	}
	return ghapi.Runner{}, GitHubError(http.StatusNotFound, "Not Found")
}

// SetBusy marks the runner named name busy (running a job) or not, and online while busy.
func (g *GitHub) SetBusy(name string, busy bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, r := range g.runners {
		if r.Name == name {
			g.runners[i].Busy = busy
			if busy {
				g.runners[i].Status = "online"
			}
		}
	}
}
