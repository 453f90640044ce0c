package provision

import (
	"context"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/steps/release"
)

// removeOfflineRunners deletes the runners this stack left registered in the scope for runs their
// instances no longer serve (release.Leftovers): those of this provision's run are left to it.
func (p *provisioning) removeOfflineRunners(ctx context.Context) {
	l := release.Leftovers{GitHub: p.d.GitHub, Store: p.d.Store, Runners: state.RunnerNamesOf(p.cfg.Stack), Log: p.d.Log}
	_, warnings := l.Remove(ctx, p.cfg.RunID)
	for _, w := range warnings {
		p.warn("housekeeping: %s", w)
	}
}
