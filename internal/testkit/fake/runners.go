package fake

import (
	"slices"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
)

// SyncRunners brings the world's GitHub up to what the agents said in the store, as the runners
// they configured would have left it: an item holding a run whose agent said REGISTERED for that
// run has its runner registered (online, named as the stack names it, labelled with the run and
// the assignment's labels); an item whose agent said DEREGISTERED has that run's runner stopped
// (offline; the runner stays registered until the release deletes it through the API). The Agent
// writes signals only: a test calls SyncRunners where it looks at GitHub after agents registered
// or deregistered (once the provision or release that waited for them has returned). It is
// idempotent, and it never registers a runner again once its instance no longer holds its run.
func (w *World) SyncRunners() {
	names := state.RunnerNamesOf(Stack)
	items := w.Store.Items()
	w.GitHub.mu.Lock()
	defer w.GitHub.mu.Unlock()
	for _, in := range items {
		switch {
		case in.Signal == state.SignalRegistered && in.SignalRun != "" && in.RunID == in.SignalRun &&
			(in.State == state.Claimed || in.State == state.Running):
			name := names.Name(in.ID, in.RunID)
			if i := w.GitHub.runnerIndex(name); i >= 0 {
				w.GitHub.runners[i].Status = "online"
				continue
			}
			w.GitHub.nextID++
			w.GitHub.runners = append(w.GitHub.runners, ghapi.Runner{ID: w.GitHub.nextID, Name: name, Status: "online",
				Labels: append([]string{in.RunID}, in.Labels...)})
		case in.Signal == state.SignalDeregistered && in.SignalRun != "":
			if i := w.GitHub.runnerIndex(names.Name(in.ID, in.SignalRun)); i >= 0 {
				w.GitHub.runners[i].Status, w.GitHub.runners[i].Busy = "offline", false
			}
		}
	}
}

// runnerIndex is the index of the runner named name, or -1; the caller holds g.mu.
func (g *GitHub) runnerIndex(name string) int {
	return slices.IndexFunc(g.runners, func(r ghapi.Runner) bool { return r.Name == name })
}
