package agent

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
)

// refusingHeartbeats is a store whose heartbeats always fail while reads work.
type refusingHeartbeats struct {
	heartbeats, gets, asks atomic.Int64
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

func (s *refusingHeartbeats) AckRead(context.Context, string, int64, time.Time) (*state.Instance, error) {
	return nil, errors.New("not used: no hand-over comes")
}

func (s *refusingHeartbeats) Ask(context.Context, int64, int, time.Time) error {
	s.asks.Add(1)
	return nil
}

// TestRefusedHeartbeatDoesNotBlind: a refused heartbeat falls back to a plain read, so the poll
// still sees the item, and the heartbeat is tried again an interval later, not on every poll.
func TestRefusedHeartbeatDoesNotBlind(t *testing.T) {
	t.Parallel()
	store := &refusingHeartbeats{}
	cfg := validConfig()
	cfg.HeartbeatInterval = time.Hour
	a, err := New(cfg, store, nil, nil, nil, nil)
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

// TestNothingServedBeforeTheAcknowledgement: an assignment whose acknowledgement is refused
// (given back meanwhile) or fails (DynamoDB unreachable) is not served: its token is not taken
// from the mailbox, none is asked for, no signal is written. Release may give back an unacknowledged claim at any moment.
func TestNothingServedBeforeTheAcknowledgement(t *testing.T) {
	t.Parallel()
	for name, ackErr := range map[string]error{
		"refused": fmt.Errorf("ack of i-0123456789abcdef0: the item moved on: %w", state.ErrConflict),
		"failed":  errors.New("throttled"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := &ackingStore{ackErr: ackErr}
			cfg := validConfig()
			a, err := New(cfg, store, nil, nil, nil, nil)
			require.NoError(t, err)
			item := &state.Instance{ID: "i-0123456789abcdef0", State: state.Claimed, Version: 7, Threshold: time.Now().Add(time.Hour),
				Assignment: state.Assignment{RunID: "4242", RunAttempt: 1, Repo: "octo/app", RunnerURL: "https://github.com/octo/app",
					RunnerPrefix: "hangar-test-", HandOverSum: state.SecretSum("token")}}
			a.mailbox.Put(doorbell.HandOver{Run: "4242", Version: 7, Kind: doorbell.KindRegistration, Secret: "token"})
			failed, err := a.serve(context.Background(), item)
			require.NoError(t, err)
			require.False(t, failed, "not a failed registration: nothing was tried")
			require.Equal(t, int64(1), store.acks.Load())
			_, held := a.mailbox.Take("4242", 7, doorbell.KindRegistration, state.SecretSum("token"))
			require.True(t, held, "the registration token was not taken")
			require.Zero(t, store.asks.Load(), "nor asked for")
			require.Zero(t, store.signals.Load(), "no signal about the run")
		})
	}
}

// countingReads is an idle item whose reads are counted.
type countingReads struct{ refusingHeartbeats }

func (s *countingReads) Heartbeat(ctx context.Context, _ time.Time) (*state.Instance, error) {
	return s.Get(ctx)
}

// TestRingReadAtOnceFloodsThrottled: rings after a read of another cause (the wait's first read)
// are read at once, a burst of them too, as an instance claimed or released right after a read
// must be; a ring beyond the burst waits out the gap, so a flood of rings cannot make the agent
// spin.
func TestRingReadAtOnceFloodsThrottled(t *testing.T) {
	t.Parallel()
	store := &countingReads{}
	cfg := validConfig()
	cfg.PollInterval = time.Hour
	a, err := New(cfg, store, nil, nil, nil, nil)
	require.NoError(t, err)
	a.ringGap = time.Hour // a read held back by the gap would not come within the test
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := a.waitFor(ctx, func(*state.Instance) bool { return false }, nil)
		done <- err
	}()
	reads := func(n int64) func() bool { return func() bool { return store.gets.Load() == n } }
	require.Eventually(t, reads(1), 10*time.Second, 5*time.Millisecond, "the wait's first read")
	for i := range int64(ringBurst) {
		a.ring()
		require.Eventually(t, reads(2+i), 10*time.Second, 5*time.Millisecond, "ring %d of a burst is read at once", i+1)
	}
	a.ring()
	require.Never(t, func() bool { return store.gets.Load() > 1+ringBurst }, 300*time.Millisecond, 10*time.Millisecond,
		"a ring beyond the burst waits out the gap")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}
