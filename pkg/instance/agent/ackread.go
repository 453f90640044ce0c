package agent

import (
	"context"
	"errors"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// readAssigned is how the reuse loop reads its item while it waits for work. When the doorbell
// has brought a hand-over the loop would take (accept: not draining, not a version that failed
// here, not a job served already), the read acknowledges that assignment as it reads
// (state.Agent.AckRead): one request where a read and the acknowledgement serving writes were
// two, on the path from the claim to REGISTERED. The acknowledgement is written before anything
// of the assignment is used, as serve's own is; serve then skips its own (Agent.acked). A
// hand-over whose assignment the item no longer holds, one already tried, or one at or below
// since (the version of what the loop last found: a hand-over left in the mailbox by a run it
// resumed rather than registered, say) falls back to a plain read.
func (a *Agent) readAssigned(since int64, accept func(run string, version int64) bool) func(context.Context) (*state.Instance, error) {
	tried := since
	return func(ctx context.Context) (*state.Instance, error) {
		h, ok := a.mailbox.Latest()
		if !ok || h.Version <= tried || !accept(h.Run, h.Version) {
			return a.poll(ctx)
		}
		tried = h.Version
		item, err := a.ackRead(ctx, h.Run, h.Version)
		if errors.Is(err, state.ErrConflict) {
			return a.poll(ctx) // moved on: see what the item holds now
		}
		if err != nil {
			return nil, err
		}
		a.acked = h.Version
		return item, nil
	}
}

// ackRead acknowledges the assignment of run at version and returns the item as it was before
// (an earlier agent's acknowledgement shows); the agent remembers the item as it now is, and the
// heartbeat the acknowledgement carries.
func (a *Agent) ackRead(ctx context.Context, run string, version int64) (*state.Instance, error) {
	var before *state.Instance
	_, err := a.read(ctx, func(ctx context.Context, now time.Time) (*state.Instance, error) {
		var err error
		if before, err = a.store.AckRead(ctx, run, version, now); err != nil {
			return nil, err
		}
		a.lastHeartbeat = now
		cur := *before
		cur.AckVersion, cur.HeartbeatAt = version, now
		return &cur, nil
	})
	return before, err
}

// ack acknowledges the assignment at version unless the loop's read did (readAssigned), and
// forgets that read's acknowledgement either way.
func (a *Agent) ack(ctx context.Context, version int64, at time.Time) error {
	acked := a.acked == version
	a.acked = 0
	if acked {
		return nil
	}
	return a.store.Ack(ctx, version, at)
}
