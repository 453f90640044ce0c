package agent

import (
	"context"
	"errors"
	"fmt"
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

// ackingStore hands out one claimed assignment and answers acknowledgements with ackErr.
type ackingStore struct {
	refusingHeartbeats
	ackErr  error
	acks    atomic.Int64
	signals atomic.Int64
}

func (s *ackingStore) Ack(context.Context, int64, time.Time) error {
	s.acks.Add(1)
	return s.ackErr
}

func (s *ackingStore) Signal(context.Context, state.Signal) error {
	s.signals.Add(1)
	return nil
}

// countingTokens counts the tokens opened: a registration starts with one.
type countingTokens struct{ opened atomic.Int64 }

func (c *countingTokens) Open(context.Context, string) (string, error) {
	c.opened.Add(1)
	return "", errors.New("no tokens here")
}

// TestNothingServedBeforeTheAcknowledgement: an assignment whose acknowledgement is refused
// (given back meanwhile) or fails (DynamoDB unreachable) is not served: no token opened, no
// signal written. Release may give back an unacknowledged claim at any moment.
func TestNothingServedBeforeTheAcknowledgement(t *testing.T) {
	t.Parallel()
	for name, ackErr := range map[string]error{
		"refused": fmt.Errorf("ack of i-0123456789abcdef0: the item moved on: %w", state.ErrConflict),
		"failed":  errors.New("throttled"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := &ackingStore{ackErr: ackErr}
			toks := &countingTokens{}
			cfg := validConfig()
			a, err := New(cfg, store, toks, nil, nil, nil)
			require.NoError(t, err)
			item := &state.Instance{ID: "i-0123456789abcdef0", State: state.Claimed, Version: 7, Threshold: time.Now().Add(time.Hour),
				Assignment: state.Assignment{RunID: "4242", RunAttempt: 1, Repo: "octo/app", RunnerURL: "https://github.com/octo/app",
					RegToken: "sealed", RunnerPrefix: "hangar-test-"}}
			failed, err := a.serve(context.Background(), item)
			require.NoError(t, err)
			require.False(t, failed, "not a failed registration: nothing was tried")
			require.Equal(t, int64(1), store.acks.Load())
			require.Zero(t, toks.opened.Load(), "the registration token was not opened")
			require.Zero(t, store.signals.Load(), "no signal about the run")
		})
	}
}
