package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
)

// Waiting for a hand-over (design §5a). The control plane sends an assignment's secret to the
// instance's doorbell right after the write that assigns it, so it is normally in the mailbox
// before the agent has read its item. When it is not (the agent noticed the assignment by a safety
// read a moment before the message arrived, restarted after receiving it, or the message was
// lost), the agent waits handOverWait, then asks (state.Agent.Ask) up to handOverAsks times,
// handOverAskWait each; provision answers each request once. The dispatcher answers none: a job
// whose hand-over does not come within jobHandOverWait fails, and its job is placed again.
const (
	handOverWait    = 2 * time.Second
	handOverAskWait = 10 * time.Second
	handOverAsks    = 3
	jobHandOverWait = 20 * time.Second
)

// errNoHandOver is a hand-over that did not come: the registration fails, and the control plane
// gives the claim back and replaces it.
var errNoHandOver = errors.New("the assignment's secret did not reach this instance's doorbell")

// handOver returns the secret of kind (doorbell.KindRegistration or KindJIT) for the assignment
// item holds, from the mailbox the doorbell fills, waiting and asking as above. The secret is
// used for that assignment alone: a hand-over of another run or version is never taken, nor one
// whose secret is not the one the assignment names (its HandOverSum), which whoever may send to
// the doorbell could have pushed (the mailbox refuses it, and the agent logs it).
func (a *Agent) handOver(ctx context.Context, item *state.Instance, kind string) (string, error) {
	start := a.now()
	wait, asks := handOverWait, handOverAsks
	if kind == doorbell.KindJIT {
		wait, asks = jobHandOverWait, 0
	}
	for n := 0; ; n++ {
		wctx, cancel := context.WithTimeout(ctx, wait)
		h, err := a.mailbox.Wait(wctx, item.RunID, item.Version, kind, item.HandOverSum)
		cancel()
		if err == nil {
			if n > 0 {
				a.log.Info("hand-over received after asking", "run", item.RunID, "version", item.Version, "asks", n)
			}
			return h.Secret, nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if n >= asks {
			return "", fmt.Errorf("%w within %s (asked %d times)", errNoHandOver, a.now().Sub(start).Round(time.Second), n)
		}
		a.log.Warn("no hand-over for the assignment yet; asking for it", "run", item.RunID, "version", item.Version, "ask", n+1)
		switch err := a.store.Ask(ctx, item.Version, n+1, a.now()); {
		case errors.Is(err, state.ErrConflict):
			// Moved on: the registration fails, and its signal, refused too, becomes the run's
			// DEREGISTERED (registerFailed).
			return "", fmt.Errorf("ask for the hand-over: %w", err)
		case err != nil:
			a.log.Warn("could not ask for the hand-over; waiting for it anyway", "error", err)
		}
		wait = handOverAskWait
	}
}
