package provision

import (
	"context"
	"errors"

	"github.com/hangar-ci/hangar/pkg/ghapi"
	"github.com/hangar-ci/hangar/pkg/state"
)

// removeOfflineRunners deletes offline runners this stack registered earlier for this scope whose
// instance no longer serves their run (a crashed agent, a vanished instance). Runners of other
// stacks, and any runner not named by this stack's RunnerNames, are never touched.
func (p *provisioning) removeOfflineRunners(ctx context.Context) {
	runners, err := p.d.GitHub.Runners(ctx)
	if err != nil {
		p.warn("list runners for housekeeping: %v", err)
		return
	}
	type stale struct {
		r       ghapi.Runner
		id, run string
	}
	var candidates []stale
	var ids []string
	names := state.RunnerNamesOf(p.cfg.Stack)
	for _, r := range runners {
		id, run, ok := names.Parse(r.Name)
		if !ok || r.Status != "offline" || r.Busy || run == p.cfg.RunID {
			continue
		}
		candidates = append(candidates, stale{r, id, run})
		ids = append(ids, id)
	}
	if len(candidates) == 0 {
		return
	}
	items, err := p.d.Store.GetMany(ctx, ids)
	if err != nil && !errors.Is(err, state.ErrBadItem) { // malformed items are left to refresh
		p.warn("housekeeping: read instances: %v", err)
		return
	}
	for _, c := range candidates {
		if it, ok := items[c.id]; ok && it.RunID == c.run && it.State != state.Terminated && it.State != state.Idle {
			continue // its instance still serves the run: it may be coming online right now
		}
		if err := p.d.GitHub.DeleteRunner(ctx, c.r.ID); err != nil {
			p.warn("housekeeping: delete offline runner %s: %v", c.r.Name, err)
			continue
		}
		p.d.Log.Info("housekeeping: deleted an offline runner left behind", "runner", c.r.Name)
	}
}
