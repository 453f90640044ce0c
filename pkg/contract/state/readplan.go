package state

import (
	"slices"
	"time"
)

// ReadPlan is when a step reads the items of the instances whose agents it has just rung, to find
// their answer: provision waits for REGISTERED, release for DEREGISTERED. An answer cannot come
// before its agent has acted, and every agent reports how long the act took it last time (regMs,
// deregMs), so the first read waits about that long (First); later reads come when the last agent
// still open is due (Next), or on the poll's backoff. Those reports are the instances' own: every
// wait planned on them is capped at MaxPlannedRead (and Next at the poll's interval), so a
// compromised agent can delay only the step that rang it, and by little.
type ReadPlan struct {
	// Signal is the answer awaited.
	Signal SignalName
	// Margin is what a report leaves out of the time from the ring to the answer: the ring's
	// delivery and the agent's own write of its signal, with room to spare.
	Margin time.Duration
	// DueMargin is what Next adds to when an agent is due, counted from its acknowledgement of the
	// ring (which the delivery precedes): its signal's write and room to spare.
	DueMargin time.Duration
	// Slowest plans the first read on the slowest report: the step goes on only once every agent
	// has answered. Otherwise it is planned on the median: each answer is acted on as it comes,
	// the faster half at once, and the poll's backoff finds the rest.
	Slowest bool
}

var (
	// Registration is provision's plan: it returns once every runner is registered.
	Registration = ReadPlan{Signal: SignalRegistered, Margin: 40 * time.Millisecond, DueMargin: 15 * time.Millisecond, Slowest: true}
	// Deregistration is release's: each instance is offered as soon as its agent deregistered.
	// Its margin is wider: a ring on a busy host takes tens of milliseconds to arrive, and a
	// release of one instance that reads too soon costs a read more than it saves.
	Deregistration = ReadPlan{Signal: SignalDeregistered, Margin: 60 * time.Millisecond}
)

// MaxPlannedRead caps the wait for a first read planned on the agents' own reports.
const MaxPlannedRead = 2 * time.Second

// minPlannedRead is the shortest wait Next plans; below it the backoff's first step is as good.
const minPlannedRead = 5 * time.Millisecond

// FirstPollWait is how long Store.Poll waits before its first read: an answer to a write just
// rung takes its agent a read of its own at least.
func FirstPollWait(interval time.Duration) time.Duration { return max(interval/4, time.Millisecond) }

// Reported is how long the agents of several instances said an act took them last time (their
// items' regMs or deregMs, in ms), plus a tenth: the median of the reports, or with slowest the
// longest. It is zero when any instance has no report (a fresh agent): the caller then polls from
// the start.
func Reported(ms []int64, slowest bool) time.Duration {
	if len(ms) == 0 || slices.Min(ms) <= 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(ms))
	d := time.Duration(sorted[len(sorted)/2]) * time.Millisecond
	if slowest {
		d = time.Duration(sorted[len(sorted)-1]) * time.Millisecond
	}
	return d + d/10
}

// took is an item's report of how long the plan's act took its agent last time, in ms.
func (r ReadPlan) took(it *Instance) int64 {
	if r.Signal == SignalDeregistered {
		return it.DeregisterMs
	}
	return it.RegisterMs
}

// First is how long to wait before polling (Store.Poll with interval) the items of insts, rung
// since ago: until a little after their agents are expected to have answered (Reported, and
// Margin), less the poll's own first wait. It is uninformed (zero, false) when one of them has
// not reported: it boots, or its agent is new, and the poll reads from the start.
func (r ReadPlan) First(insts []Instance, since, interval time.Duration) (time.Duration, bool) {
	ms := make([]int64, len(insts))
	for i := range insts {
		ms[i] = r.took(&insts[i])
	}
	reported := Reported(ms, r.Slowest)
	if reported == 0 {
		return 0, false
	}
	d := reported + r.Margin - since - FirstPollWait(interval)
	return min(max(d, 0), MaxPlannedRead), true
}

// Awaited is one instance a step waits on: the version its write left (the answer must be about
// it or a later one), and the item as it was when the wait began (its agent's earlier report).
type Awaited struct {
	Version int64
	Before  *Instance
}

// Expected is how long an agent is expected to take from the ring to its answer: the median of
// what the agents awaited reported, a tenth added (Reported), this run's own answers replacing
// their earlier reports as they come in. Zero when none has reported.
func (r ReadPlan) Expected(awaited map[string]Awaited, items map[string]*Instance, run string) time.Duration {
	var ms []int64
	for id, a := range awaited {
		if it, ok := items[id]; ok && it.SignalFor(r.Signal, run, a.Version) && r.took(it) > 0 {
			ms = append(ms, r.took(it))
		} else if a.Before != nil && r.took(a.Before) > 0 {
			ms = append(ms, r.took(a.Before))
		}
	}
	return Reported(ms, false)
}

// Next plans the read after one that found open still unanswered (items as just read, at now):
// when the last of them is expected to have answered, expected (Expected) after its agent
// acknowledged the ring (AckVersion, HeartbeatAt; from now for one that has not yet, or whose
// clock says later than now), and DueMargin. A read timed so usually finds all of them done,
// where reads at growing intervals find the last only at the next, up to an interval later.
// Zero leaves the timing to the poll's backoff: no estimate, or every open agent already due
// (it is late, and a read soon is what helps). Store.Poll caps it at the interval.
func (r ReadPlan) Next(open []string, awaited map[string]Awaited, items map[string]*Instance, expected time.Duration, now time.Time) time.Duration {
	if expected <= 0 || len(open) == 0 {
		return 0
	}
	var last time.Time
	for _, id := range open {
		due := now.Add(expected)
		if it, ok := items[id]; ok && it.AckVersion >= awaited[id].Version && !it.HeartbeatAt.IsZero() && it.HeartbeatAt.Before(now) {
			due = it.HeartbeatAt.Add(expected)
		}
		if due.After(last) {
			last = due
		}
	}
	d := last.Add(r.DueMargin).Sub(now)
	if d < minPlannedRead {
		return 0
	}
	return d
}
