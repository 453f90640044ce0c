package fake

import (
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// theft is another run taking one instance just before the first write that would move it to a
// state (Store.StealBefore).
type theft struct {
	target, run string
	before      state.State
	done        bool
}

// StealBefore makes another run, run, take instance target just before the store's first write
// (Transition, or a change of TransitionAll) that would move it to state before (terminated when
// empty), as a release and a provision of another run could between the caller's read and its
// write: the instance goes back to idle from whatever run held it, then is claimed for run (from
// octo/thief, whatever the reuse scope). The caller's write then loses; what it does next must
// leave the thief's instance alone. Stolen reports whether it happened.
func (s *Store) StealBefore(target, run string, before state.State) {
	if before == "" {
		before = state.Terminated
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.thefts = append(s.thefts, &theft{target: target, run: run, before: before})
}

// Stolen reports whether the theft of target has happened.
func (s *Store) Stolen(target string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.thefts {
		if t.target == target {
			return t.done
		}
	}
	return false
}

// steal carries out the thefts the changes set off; the caller holds s.mu.
func (s *Store) steal(changes ...state.Change) {
	for _, t := range s.thefts {
		for _, c := range changes {
			if t.done || c.InstanceID != t.target || c.To != t.before {
				continue
			}
			cur, ok := s.items[t.target]
			if !ok {
				continue
			}
			t.done = true
			now := s.now()
			next := *cur
			if cur.State != state.Idle {
				next = state.Change{InstanceID: cur.ID, Pool: cur.Pool, From: cur.State, To: state.Idle, Version: cur.Version,
					RunID: cur.RunID, Threshold: now.Add(10 * time.Minute), Reason: "released by the thief"}.Apply(next, now)
			}
			next = state.Change{InstanceID: cur.ID, Pool: cur.Pool, From: state.Idle, To: state.Claimed, Version: next.Version,
				Threshold: now.Add(10 * time.Minute), Reuse: state.ReuseAny, Reason: "claimed by the thief",
				Assign: &state.Assignment{RunID: t.run, RunAttempt: 1, Repo: "octo/thief"}}.Apply(next, now)
			s.items[t.target] = &next
		}
	}
}
