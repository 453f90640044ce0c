package fake

import (
	"context"
	"fmt"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// AgentStore is one instance's agent's view of a Store: what state.Agent does on DynamoDB (the
// Store of pkg/instance/agent), on the fake's item of instance ID. Reads count as the Store's
// "Get" calls, every write as an "Agent" call (Inject fails them).
type AgentStore struct {
	Store *Store
	ID    string
}

// Get reads the item, or returns state.ErrNotFound (state.Agent.Get).
func (a *AgentStore) Get(ctx context.Context) (*state.Instance, error) {
	return a.Store.Get(ctx, a.ID)
}

// Heartbeat records that the agent is alive at at and returns the item as it is after the write
// (state.Agent.Heartbeat).
func (a *AgentStore) Heartbeat(_ context.Context, at time.Time) (*state.Instance, error) {
	return a.Store.AgentHeartbeat(a.ID, at)
}

// Signal writes sig, only while the item is at sig.Version (state.Agent.Signal).
func (a *AgentStore) Signal(_ context.Context, sig state.Signal) error {
	return a.Store.AgentSignal(a.ID, sig)
}

// Ack acknowledges the assignment at version, with a heartbeat (state.Agent.Ack).
func (a *AgentStore) Ack(_ context.Context, version int64, at time.Time) error {
	return a.Store.AgentAck(a.ID, version, at)
}

// Ask records the agent's n-th request for the hand-over of the assignment at version
// (state.Agent.Ask).
func (a *AgentStore) Ask(_ context.Context, version int64, n int, at time.Time) error {
	if n < 1 {
		return fmt.Errorf("ask of %s: request %d: want a request count from 1", a.ID, n)
	}
	return a.Store.AgentAsk(a.ID, version, n, at)
}

// AckRead acknowledges the assignment of run at version, as Ack does, and returns the item as it
// was just before, in one step; state.ErrConflict when the item no longer holds run at version
// (state.Agent.AckRead).
func (a *AgentStore) AckRead(_ context.Context, run string, version int64, at time.Time) (*state.Instance, error) {
	s := a.Store
	if err := s.call("Agent"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	in, ok := s.items[a.ID]
	switch {
	case !ok:
		s.mu.Unlock()
		return nil, fmt.Errorf("ack of %s: %w", a.ID, state.ErrNotFound)
	case in.Version != version || in.RunID != run:
		holder := in.Holder()
		s.mu.Unlock()
		return nil, fmt.Errorf("ack of %s: the item moved on (now %s): %w", a.ID, holder, state.ErrConflict)
	}
	before := clone(in)
	in.HeartbeatAt, in.AckVersion = stored(at), version
	s.mu.Unlock()
	s.notify()
	return before, nil
}
