package agent

import (
	"context"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
)

// watchSpot asks the metadata service for a spot interruption notice every SpotInterval. On a
// notice it signals SPOT_INTERRUPTED and the agent takes no new work; a job already running goes
// on for the two minutes it has.
func (a *Agent) watchSpot(ctx context.Context) {
	t := time.NewTicker(a.cfg.SpotInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		notice, ok, err := metadataText(ctx, a.md, "spot/instance-action")
		if err != nil || !ok {
			continue // not a spot instance, no notice, or metadata briefly away
		}
		a.draining.Store(true)
		a.log.Warn("spot interruption notice; taking no new work", "notice", notice)
		backoff := wait.Backoff{Initial: maxBackoff, Clock: a.Clock}
		for ctx.Err() == nil {
			if err := a.signalLatest(ctx, state.Signal{Name: state.SignalSpotInterrupted, Log: notice}); err == nil {
				return
			} else {
				a.log.Warn("signal spot interruption", "error", err)
			}
			if backoff.Sleep(ctx) != nil {
				return
			}
		}
		return
	}
}
