package fake

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
)

// GitHub holds one scope's self-hosted runners in memory and mints registration tokens.
type GitHub struct {
	recorder

	mu      sync.Mutex
	runners []ghapi.Runner
	nextID  int64
	minted  int
	groups  map[string]fakeGroup // repository runner groups made, by name
	repos   []ghapi.Repository   // the installation's repositories (SetRepositories)
	wjobs   []workflowJob        // its runs' jobs (SetWorkflowJob)
}

// fakeGroup is a runner group RepositoryGroup made: its id and the repository it is open to.
type fakeGroup struct{ id, repo int64 }

// Reset forgets runners, recorded calls and injected errors.
func (g *GitHub) Reset() {
	g.mu.Lock()
	g.runners, g.minted, g.groups = nil, 0, nil
	g.mu.Unlock()
	g.resetCalls()
}

// RegistrationToken mints a token valid for an hour.
func (g *GitHub) RegistrationToken(context.Context) (ghapi.Token, error) {
	if err := g.call("RegistrationToken"); err != nil {
		return ghapi.Token{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.minted++
	return ghapi.Token{Value: fmt.Sprintf("REGTOKEN%04d", g.minted), ExpiresAt: time.Now().Add(time.Hour)}, nil
}

// AddRunner registers a runner (as an agent's runner would) and returns its id.
func (g *GitHub) AddRunner(name, status string, busy bool) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.nextID++
	g.runners = append(g.runners, ghapi.Runner{ID: g.nextID, Name: name, Status: status, Busy: busy})
	return g.nextID
}

// Runners lists the scope's runners.
func (g *GitHub) Runners(context.Context) ([]ghapi.Runner, error) {
	if err := g.call("Runners"); err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.runners), nil
}

// DeleteRunner removes runner id, as ghclient.Client does: an unknown id is gone already, which
// is done; a busy runner is GitHub's 422.
func (g *GitHub) DeleteRunner(_ context.Context, id int64) error {
	if err := g.call("DeleteRunner"); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	i := slices.IndexFunc(g.runners, func(r ghapi.Runner) bool { return r.ID == id })
	if i < 0 {
		return nil
	}
	if g.runners[i].Busy {
		return GitHubError(http.StatusUnprocessableEntity, fmt.Sprintf("Bad request - Runner %q is still running a job", g.runners[i].Name))
	}
	g.runners = slices.Delete(g.runners, i, i+1)
	return nil
}

// RunnerNames returns the names of the registered runners.
func (g *GitHub) RunnerNames() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, len(g.runners))
	for i, r := range g.runners {
		out[i] = r.Name
	}
	return out
}
