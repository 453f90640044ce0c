package provision

import (
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// dueMargin is what the wait adds to when an agent is expected to have registered: its REGISTERED
// write, which regMs leaves out, and room to spare.
const dueMargin = 15 * time.Millisecond

// claimReport is what the wait knows of a pending member when it starts (the members themselves
// change under it as they become ready): the version provision wrote, and what its agent
// reported of its last registration (regMs).
type claimReport struct {
	version int64
	regMs   int64
}

// expectedRegistration is how long an agent is expected to take from the ring that brings its
// claim to REGISTERED: the median of what the agents of this provision last reported (regMs, a
// tenth added: state.Reported), taking this run's own reports where they have come in. Zero
// when none has reported. Each report is its agent's own; the wait bounds what it plans on them.
func expectedRegistration(claims map[string]claimReport, items map[string]*state.Instance, run string) time.Duration {
	var ms []int64
	for id, c := range claims {
		if it, ok := items[id]; ok && it.SignalFor(state.SignalRegistered, run, c.version) && it.RegisterMs > 0 {
			ms = append(ms, it.RegisterMs)
		} else if c.regMs > 0 {
			ms = append(ms, c.regMs)
		}
	}
	return state.Reported(ms, false)
}

// nextRead plans the wait's next read of the open members, given their items as just read at now:
// when the last of them is expected to have registered (reg after its agent acknowledged the
// claim, which the hand-over's ring makes it do at once: state.Agent.AckRead; reg from now for
// one that has not yet), and dueMargin. A read timed so usually finds all of them registered,
// where reads at growing intervals find the last of them only at the next, up to a full
// interval later. Zero leaves the timing to the poll's backoff: no estimate, or every open member
// already due (it is late, and a read soon is what helps).
func nextRead(open []string, claims map[string]claimReport, items map[string]*state.Instance, reg time.Duration, now time.Time) time.Duration {
	if reg <= 0 || len(open) == 0 {
		return 0
	}
	var last time.Time
	for _, id := range open {
		due := now.Add(reg)
		// An acknowledgement's time is the agent's clock: one later than now counts as now.
		if it, ok := items[id]; ok && it.AckVersion >= claims[id].version && !it.HeartbeatAt.IsZero() && it.HeartbeatAt.Before(now) {
			due = it.HeartbeatAt.Add(reg)
		}
		if due.After(last) {
			last = due
		}
	}
	d := last.Add(dueMargin).Sub(now)
	if d < minPlannedRead {
		return 0
	}
	return d
}

// minPlannedRead is the shortest wait nextRead plans; below it the backoff's first step is as good.
const minPlannedRead = 5 * time.Millisecond
