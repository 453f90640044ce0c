package fake

import (
	"context"
	"fmt"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// Transition applies c if, and only if, its condition holds, as state.Store.Transition does, and
// returns the item as written; a lost condition returns *state.ConflictError with the item as it
// is (nil Current when there is none). An illegal or malformed change fails before anything.
func (s *Store) Transition(_ context.Context, c state.Change) (*state.Instance, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := s.call("Transition"); err != nil {
		return nil, err
	}
	now := s.now()
	s.mu.Lock()
	s.steal(c)
	cur, ok := s.items[c.InstanceID]
	if !ok || !holds(c, cur) {
		conflict := &state.ConflictError{InstanceID: c.InstanceID, From: c.From, To: c.To, RunID: c.RunID, Version: c.Version}
		if ok {
			conflict.Current = clone(cur)
		}
		s.mu.Unlock()
		return nil, conflict
	}
	next := c.Apply(*cur, now)
	s.items[c.InstanceID] = &next
	out := clone(&next)
	s.mu.Unlock()
	s.notify()
	return out, nil
}

// holds reports whether the condition of c holds for the item in.
func holds(c state.Change, in *state.Instance) bool {
	if in.State != c.From || in.Version != c.Version || in.Pool != c.Pool {
		return false
	}
	if c.RunMustMatch() && in.RunID != c.RunID {
		return false
	}
	if c.RunMustBeAbsent() && in.RunID != "" {
		return false
	}
	if c.Assign != nil {
		if !state.Claimable(c.Reuse, in, c.Assign.Repo) {
			return false
		}
		if !c.AliveSince.IsZero() && c.From == state.Idle &&
			(in.HeartbeatAt.IsZero() || in.HeartbeatAt.UnixMilli() < c.AliveSince.UnixMilli()) {
			return false
		}
	}
	if c.Unacknowledged && in.AckVersion >= c.Version {
		return false
	}
	if c.Releases() && (in.Retire != "") != c.Marked {
		return false
	}
	if c.Registered && !in.SignalFor(state.SignalRegistered, c.RunID, c.Version) {
		return false
	}
	return true
}

// AgentAck records, with a heartbeat at at, that instance id's agent noticed the assignment
// written at version, only while the item is still at that version (state.Agent.Ack).
func (s *Store) AgentAck(id string, version int64, at time.Time) error {
	return s.agentWrite(id, "ack", version, func(in *state.Instance) {
		in.HeartbeatAt, in.AckVersion = stored(at), version
	})
}

// AgentAsk records, with a heartbeat and an acknowledgement, the agent's n-th request for the
// hand-over of the assignment at version, only while the item is at that version
// (state.Agent.Ask).
func (s *Store) AgentAsk(id string, version int64, n int, at time.Time) error {
	return s.agentWrite(id, "ask", version, func(in *state.Instance) {
		in.HeartbeatAt, in.AckVersion, in.AskVersion, in.Asks = stored(at), version, version, n
	})
}

// AgentHeartbeat records that instance id's agent is alive at at (state.Agent.Heartbeat) and
// returns the item as it is after the write.
func (s *Store) AgentHeartbeat(id string, at time.Time) (*state.Instance, error) {
	if err := s.agentWrite(id, "heartbeat", 0, func(in *state.Instance) { in.HeartbeatAt = stored(at) }); err != nil {
		return nil, err
	}
	return s.Item(id), nil
}

// AgentSignal writes sig to instance id's item, only while the item is at sig.Version
// (state.Agent.Signal).
func (s *Store) AgentSignal(id string, sig state.Signal) error {
	if err := sig.Validate(); err != nil {
		return err
	}
	if sig.At.IsZero() {
		sig.At = s.now()
	}
	return s.agentWrite(id, "signal "+string(sig.Name), sig.Version, func(in *state.Instance) {
		in.Signal, in.SignalRun, in.SignalVersion = sig.Name, sig.Run, sig.Version
		in.SignalAt, in.SignalLog = stored(sig.At), state.LogTail(sig.Log, state.MaxLogTail)
	})
}

// agentWrite applies one of the agent's writes to its own item, conditional on version (when not
// 0). Like state.Agent's, it fails with state.ErrNotFound or state.ErrConflict.
func (s *Store) agentWrite(id, what string, version int64, set func(*state.Instance)) error {
	if err := s.call("Agent"); err != nil {
		return err
	}
	s.mu.Lock()
	in, ok := s.items[id]
	switch {
	case !ok:
		s.mu.Unlock()
		return fmt.Errorf("%s of %s: %w", what, id, state.ErrNotFound)
	case version != 0 && in.Version != version:
		holder := in.Holder()
		s.mu.Unlock()
		return fmt.Errorf("%s of %s: the item moved on (now %s): %w", what, id, holder, state.ErrConflict)
	}
	set(in)
	s.mu.Unlock()
	s.notify()
	return nil
}

// TransitionAll writes changes as state.Store.TransitionAll does: a batch of one is a single
// Transition; a larger one is one "TransitionAll" call that writes every change if every
// condition holds, and otherwise settles the lost ones as conflicts and writes the rest one by one
// (Transition). An error injected for TransitionAll fails the whole batch; invalid or repeated
// changes fail alone.
func (s *Store) TransitionAll(ctx context.Context, changes []state.Change, befores []state.Instance) []state.Written {
	out := make([]state.Written, len(changes))
	var batch []int
	for i, err := range state.BatchErrors(changes, befores) {
		if err != nil {
			out[i].Err = err
			continue
		}
		batch = append(batch, i)
	}
	singly := func(i int) {
		out[i].Item, out[i].Err = s.Transition(ctx, changes[i])
	}
	if len(batch) == 1 {
		singly(batch[0])
	}
	if len(batch) < 2 {
		return out
	}
	if err := s.call("TransitionAll"); err != nil {
		for _, i := range batch {
			out[i].Err = err
		}
		return out
	}
	now := s.now()
	s.mu.Lock()
	for _, i := range batch {
		s.steal(changes[i])
	}
	lost := map[int]bool{}
	for _, i := range batch {
		if cur, ok := s.items[changes[i].InstanceID]; !ok || !holds(changes[i], cur) {
			lost[i] = true
		}
	}
	if len(lost) == 0 {
		for _, i := range batch {
			next := changes[i].Apply(*s.items[changes[i].InstanceID], now)
			s.items[next.ID] = &next
			written := changes[i].Apply(befores[i], now)
			out[i].Item = &written
		}
		s.mu.Unlock()
		s.notify()
		return out
	}
	for i := range lost {
		c := changes[i]
		conflict := &state.ConflictError{InstanceID: c.InstanceID, From: c.From, To: c.To, RunID: c.RunID, Version: c.Version}
		if cur, ok := s.items[c.InstanceID]; ok {
			conflict.Current = clone(cur)
		}
		out[i].Err = conflict
	}
	s.mu.Unlock()
	for _, i := range batch {
		if !lost[i] {
			singly(i)
		}
	}
	return out
}

// MarkRetire marks an instance serving run to retire (state.Store.MarkRetire): the item as
// written and true, or as it is (nil: none) and false when it does not serve run.
func (s *Store) MarkRetire(_ context.Context, id, run, why string) (*state.Instance, bool, error) {
	if err := s.call("MarkRetire"); err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	in, ok := s.items[id]
	if !ok {
		s.mu.Unlock()
		return nil, false, nil
	}
	if in.RunID != run {
		out := clone(in)
		s.mu.Unlock()
		return out, false, nil
	}
	in.Retire = why
	out := clone(in)
	s.mu.Unlock()
	s.notify()
	return out, true, nil
}
