package release

import (
	"context"
	"slices"
)

// cleanGitHub deletes every runner still carrying the run's label.
func (g *giving) cleanGitHub(ctx context.Context) {
	runners, err := g.d.GitHub.Runners(ctx)
	if err != nil {
		g.warn("check GitHub for runners of run %s: %v", g.run, err)
		return
	}
	for _, x := range runners {
		if !slices.Contains(x.Labels, g.run) {
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
