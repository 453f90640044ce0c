package release

import (
	"context"
)

// cleanGitHub deletes the runners this stack registered for the run on the instances ours
// accepts, found by the names Hangar gave them (RunnerNames), never by label: a runner that
// merely carries the run id among its labels is someone else's.
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
			g.warn("delete leftover runner %s: %v", x.Name, err)
			continue
		}
		g.d.Log.Info("deleted leftover runner", "runner", x.Name)
		g.mu.Lock()
		g.res.RunnersDeleted++
		g.mu.Unlock()
	}
}
