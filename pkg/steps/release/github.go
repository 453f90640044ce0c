package release

import (
	"context"
)

// cleanGitHub deletes the runners this stack registered for the run on the instances ours
// accepts, found by the names Hangar gave them (RunnerNames), never by label: a runner that
// merely carries the run id among its labels is someone else's. No instance holds a token that
// could remove its runner: this is how the run's runners leave GitHub, once their agents have
// stopped them (DEREGISTERED) or their instances are terminated.
func (g *giving) cleanGitHub(ctx context.Context, ours func(instanceID string) bool) {
	runners, err := g.d.GitHub.Runners(ctx)
	if err != nil {
		g.warn("check GitHub for runners of run %s: %v", g.run, err)
		return
	}
	for _, x := range runners {
		id, run, ok := g.d.Runners.Parse(x.Name)
		if !ok || run != g.run || !ours(id) {
			continue
		}
		if err := g.d.GitHub.DeleteRunner(ctx, x.ID); err != nil {
			g.warn("delete runner %s: %v", x.Name, err)
			continue
		}
		g.d.Log.Info("deleted the run's runner", "runner", x.Name)
		g.mu.Lock()
		g.res.RunnersDeleted++
		g.mu.Unlock()
	}
}

// removeLeftovers deletes the stack's runners other runs left behind in the scope (Leftovers).
func (g *giving) removeLeftovers(ctx context.Context) {
	l := Leftovers{GitHub: g.d.GitHub, Store: g.d.Store, Runners: g.d.Runners, Log: g.d.Log}
	n, warnings := l.Remove(ctx, g.run)
	for _, w := range warnings {
		g.warn("%s", w)
	}
	g.mu.Lock()
	g.res.LeftoversDeleted += n
	g.mu.Unlock()
}
