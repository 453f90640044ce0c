package provision

import (
	"context"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// removeOfflineRunners deletes the runners this stack left registered in the scope for runs their
// instances no longer serve (pool.RemoveLeftovers): those of this provision's run are left to it.
func (p *provisioning) removeOfflineRunners(ctx context.Context) {
	_, warnings := p.d.Pool.RemoveLeftovers(ctx, p.d.GitHub, state.RunnerNamesOf(p.cfg.Stack), p.cfg.RunID)
	for _, w := range warnings {
		p.warn("housekeeping: %s", w)
	}
}
