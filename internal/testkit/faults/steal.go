package faults

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// Thief is a state store (the real one, underneath) under which another run claims one instance
// just before the caller's first write that would move it to state Before, as a release and a
// provision of another run could between the caller's read and its write. The caller's write
// then loses, and whatever the caller does next must leave the thief's instance alone.
type Thief struct {
	*state.Store
	// Target is the instance to take; Run is the run that takes it.
	Target, Run string
	// Before is the state whose first write to Target triggers the theft (terminated when empty).
	Before state.State

	once   sync.Once
	stolen atomic.Bool
	err    error
}

// Stolen reports whether the theft happened (and failed with no error).
func (t *Thief) Stolen() (bool, error) { return t.stolen.Load(), t.err }

// Transition steals Target first when c would move it to Before.
func (t *Thief) Transition(ctx context.Context, c state.Change) (*state.Instance, error) {
	before := t.Before
	if before == "" {
		before = state.Terminated
	}
	if c.To == before && c.InstanceID == t.Target {
		t.once.Do(func() { t.err = t.steal(ctx) })
	}
	return t.Store.Transition(ctx, c)
}

// steal releases the instance from whichever run holds it and claims it for t.Run.
func (t *Thief) steal(ctx context.Context) error {
	in, err := t.Get(ctx, t.Target)
	if err != nil {
		return fmt.Errorf("steal %s: %w", t.Target, err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	switch in.State {
	case state.Claimed, state.Running, state.Created:
		if in, err = t.Store.Transition(ctx, state.Change{InstanceID: in.ID, Pool: in.Pool, From: in.State, To: state.Idle,
			Version: in.Version, RunID: in.RunID, Threshold: deadline, Reason: "released by the thief"}); err != nil {
			return fmt.Errorf("steal %s: release it: %w", t.Target, err)
		}
	case state.Idle:
	default:
		return fmt.Errorf("steal %s: it is %s", t.Target, in.State)
	}
	if _, err = t.Store.Transition(ctx, state.Change{InstanceID: in.ID, Pool: in.Pool, From: state.Idle, To: state.Claimed,
		Version: in.Version, Threshold: deadline, Reuse: state.ReuseAny, Assign: &state.Assignment{RunID: t.Run, RunAttempt: 1, Repo: "octo/thief"}}); err != nil {
		return fmt.Errorf("steal %s: claim it: %w", t.Target, err)
	}
	t.stolen.Store(true)
	return nil
}

// TransitionAll steals Target first when one of changes would move it to Before.
func (t *Thief) TransitionAll(ctx context.Context, changes []state.Change, befores []state.Instance) []state.Written {
	before := t.Before
	if before == "" {
		before = state.Terminated
	}
	for _, c := range changes {
		if c.To == before && c.InstanceID == t.Target {
			t.once.Do(func() { t.err = t.steal(ctx) })
		}
	}
	return t.Store.TransitionAll(ctx, changes, befores)
}
