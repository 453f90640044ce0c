package pool

import (
	"context"
	"errors"
	"fmt"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
)

// RemoveLeftovers deletes the runners the stack left registered on GitHub, in gh's scope, for
// runs their instances no longer serve: a provision killed mid-way, a release that never
// finished, an instance that vanished. Both doors run it for their scope, so that a leftover is
// gone by the next step or job of the repository (or organisation).
//
// A runner is a leftover when its name is one of the stack's (runnerNames) for a workflow run, it is
// offline and not busy, and its instance has no item, is terminated, or no longer holds the
// runner's run. Any other runner, another stack's above all, is never touched; those of run keep
// (the caller's own, which it deals with itself) neither, nor any label-routed job's: a
// just-in-time runner is minted before its claim or its new instance's item is written, so no
// item read can tell it from a leftover. The labels door removes its own (a claim it lost, a
// runner its job's check finds waiting, a lost return), and GitHub removes an ephemeral runner
// that has not connected for a day; until then an offline runner takes no job. It returns how
// many it deleted and a warning per problem; a problem never stops the caller.
func (p *Pool) RemoveLeftovers(ctx context.Context, gh Runners, runnerNames state.RunnerNames, keep string) (int, []string) {
	runners, err := gh.Runners(ctx)
	if err != nil {
		return 0, []string{fmt.Sprintf("list runners for leftovers: %v", err)}
	}
	type candidate struct {
		r       ghapi.Runner
		id, run string
	}
	var (
		candidates []candidate
		ids        []string
	)
	for _, r := range runners {
		id, run, ok := runnerNames.Parse(r.Name)
		if !ok || r.Status != "offline" || r.Busy || run == keep || names.IsJobKey(run) {
			continue
		}
		candidates = append(candidates, candidate{r, id, run})
		ids = append(ids, id)
	}
	if len(candidates) == 0 {
		return 0, nil
	}
	// Listed first, read second: a runner registered for a run exists only after its claim, so
	// the item read now shows that claim, or what came after it.
	items, err := p.Store.GetMany(ctx, ids)
	if err != nil && !errors.Is(err, state.ErrBadItem) { // malformed items are left to refresh
		return 0, []string{fmt.Sprintf("leftovers: read instances: %v", err)}
	}
	var (
		deleted  int
		warnings []string
	)
	for _, c := range candidates {
		if it, ok := items[c.id]; ok && servesRun(it, c.run) {
			continue // its instance still serves the run: it may be coming online right now
		}
		if err := gh.DeleteRunner(ctx, c.r.ID); err != nil {
			warnings = append(warnings, fmt.Sprintf("leftovers: delete offline runner %s: %v", c.r.Name, err))
			continue
		}
		deleted++
		p.log().Info("deleted a runner left behind", "runner", c.r.Name)
	}
	return deleted, warnings
}

// servesRun reports whether the item still holds run.
func servesRun(it *state.Instance, run string) bool {
	return it.RunID == run && it.State != state.Terminated && it.State != state.Idle
}
