package state

import (
	"errors"
	"fmt"
)

// runRule says what a transition requires of, and does to, the item's runId.
type runRule int

const (
	runAny     runRule = iota // not part of the condition
	runMatch                  // condition runId = the caller's RunID; kept
	runAbsent                 // condition attribute_not_exists(runId); stays absent
	runSet                    // condition attribute_not_exists(runId); set from the Assignment
	runRelease                // condition runId = the caller's RunID; removed with the assignment
	// runAbsentOrRelease is runAbsent without a RunID (a warm instance promoted), runRelease with
	// one (an instance created for a label-routed job whose runner got no job, given back).
	runAbsentOrRelease
)

type edge struct{ from, to State }

type rule struct {
	before runRule
	writer string // who writes it, for docs and errors
}

// transitions is the state machine of docs/design.md §3. Into terminated is handled separately:
// every live state may go there, with runAny.
var transitions = map[edge]rule{
	{Created, Running}: {runMatch, "provision"},
	{Created, Idle}:    {runAbsentOrRelease, "refresh, dispatcher"},
	{Idle, Claimed}:    {runSet, "provision"},
	{Stopped, Claimed}: {runSet, "provision"},
	{Claimed, Running}: {runMatch, "provision"},
	{Claimed, Idle}:    {runRelease, "provision"},
	{Running, Idle}:    {runRelease, "release"},
	{Idle, Stopped}:    {runAbsent, "refresh"},
	{Stopped, Idle}:    {runAbsent, "refresh"},
}

// ErrIllegalTransition is returned, before any request, for a pair of states the state machine
// does not allow.
var ErrIllegalTransition = errors.New("illegal state transition")

// lookup returns the rule for from→to.
func lookup(from, to State) (rule, error) {
	if !from.Valid() {
		return rule{}, fmt.Errorf("%w: unknown from-state %q", ErrIllegalTransition, from)
	}
	if !to.Valid() {
		return rule{}, fmt.Errorf("%w: unknown to-state %q", ErrIllegalTransition, to)
	}
	if to == Terminated && from != Terminated {
		return rule{runAny, "refresh, provision, release"}, nil
	}
	r, ok := transitions[edge{from, to}]
	if !ok {
		return rule{}, fmt.Errorf("%w: %s → %s", ErrIllegalTransition, from, to)
	}
	return r, nil
}

// Allowed reports whether from→to is a transition of the state machine.
func Allowed(from, to State) bool {
	_, err := lookup(from, to)
	return err == nil
}

// The parts of a transition's rule that the write's condition and update depend on, for code
// that applies changes without DynamoDB (an in-memory store for tests). Each assumes the change
// passed Validate.

// RunMustMatch reports whether the change's condition requires the item's runId to be c.RunID.
func (c Change) RunMustMatch() bool {
	r, _ := lookup(c.From, c.To)
	return r.before == runMatch || r.before == runRelease || ((r.before == runAny || r.before == runAbsentOrRelease) && c.RunID != "")
}

// RunMustBeAbsent reports whether the change's condition requires the item to hold no run.
func (c Change) RunMustBeAbsent() bool {
	r, _ := lookup(c.From, c.To)
	return r.before == runAbsent || r.before == runSet || (r.before == runAbsentOrRelease && c.RunID == "")
}

// Releases reports whether the change gives the run back: the assignment leaves the item.
func (c Change) Releases() bool {
	r, _ := lookup(c.From, c.To)
	return r.before == runRelease || (r.before == runAbsentOrRelease && c.RunID != "")
}
