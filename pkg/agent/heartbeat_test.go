package agent

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/state"
)

// refusingHeartbeats is a store whose heartbeats always fail while reads work.
type refusingHeartbeats struct {
	heartbeats, gets atomic.Int64
}

func (s *refusingHeartbeats) Get(context.Context) (*state.Instance, error) {
	s.gets.Add(1)
	return &state.Instance{ID: "i-0123456789abcdef0", State: state.Idle, Threshold: time.Now().Add(time.Hour)}, nil
}

func (s *refusingHeartbeats) Heartbeat(context.Context, time.Time) (*state.Instance, error) {
	s.heartbeats.Add(1)
	return nil, errors.New("heartbeat refused")
}

func (s *refusingHeartbeats) Signal(context.Context, state.Signal) error { return nil }

func (s *refusingHeartbeats) Ack(context.Context, int64, time.Time) error { return nil }

// TestRefusedHeartbeatDoesNotBlind: a refused heartbeat falls back to a plain read, so the poll
// still sees the item, and the heartbeat is tried again an interval later, not on every poll.
func TestRefusedHeartbeatDoesNotBlind(t *testing.T) {
	t.Parallel()
	store := &refusingHeartbeats{}
	cfg := validConfig()
	cfg.HeartbeatInterval = time.Hour
	a, err := New(cfg, store, plainTokens{}, nil, nil, nil)
	require.NoError(t, err)
	for range 5 {
		item, err := a.poll(context.Background())
		require.NoError(t, err)
		require.Equal(t, state.Idle, item.State)
	}
	require.Equal(t, int64(1), store.heartbeats.Load(), "one heartbeat per interval, refused or not")
	require.Equal(t, int64(5), store.gets.Load(), "every poll read the item")
	require.NotZero(t, a.deadline.Load(), "the deadline was learned despite the refused heartbeat")
}

// plainTokens opens nothing: the heartbeat tests never register a runner.
type plainTokens struct{}

func (plainTokens) Open(context.Context, string) (string, error) {
	return "", errors.New("no tokens here")
}
