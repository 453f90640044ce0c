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

// ackReadStore counts reads, acknowledgements and read-acknowledgements; AckRead answers with
// ackReadErr, else with a claimed item of the run and version asked for.
type ackReadStore struct {
	refusingHeartbeats
	acks, ackReads atomic.Int64
	ackReadErr     error
}

func (s *ackReadStore) Ack(context.Context, int64, time.Time) error {
	s.acks.Add(1)
	return nil
}

func (s *ackReadStore) AckRead(_ context.Context, run string, version int64, _ time.Time) (*state.Instance, error) {
	s.ackReads.Add(1)
	if s.ackReadErr != nil {
		return nil, s.ackReadErr
	}
	it := &state.Instance{ID: "i-0123456789abcdef0", State: state.Claimed, Version: version, Threshold: time.Now().Add(time.Hour)}
	it.RunID = run
	return it, nil
}

// TestReadAssignedAcknowledgesAHandedOverAssignment: with a hand-over the loop would take, the
// loop's read is the acknowledgement (one request), serving then writes none of its own; without
// one, with one the loop refuses or found already, or once the item has moved on from it, the
// read is a plain one.
func TestReadAssignedAcknowledgesAHandedOverAssignment(t *testing.T) {
	t.Parallel()
	handOver := doorbell.HandOver{Run: "5", Version: 3, Kind: doorbell.KindRegistration, Secret: "s", ExpiresAt: time.Now().Add(time.Hour)}
	for _, tc := range []struct {
		name          string
		since         int64 // the version the loop found last
		handedOver    bool
		accept        bool
		ackReadErr    error
		wantAckReads  int64 // over two reads
		wantGets      int64
		wantServeAcks int64 // serving the assignment at version 3
	}{
		{"handed over and taken", 0, true, true, nil, 1, 1, 0},
		{"no hand-over", 0, false, true, nil, 0, 2, 1},
		{"refused by the loop (draining, failed here, served)", 0, true, false, nil, 0, 2, 1},
		{"left over from what the loop found last (a resumed run)", 3, true, true, nil, 0, 2, 1},
		{"moved on before the read", 0, true, true, fmt.Errorf("ack: %w", state.ErrConflict), 1, 2, 1},
		{"unreachable", 0, true, true, errors.New("timeout"), 1, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := &ackReadStore{ackReadErr: tc.ackReadErr}
			cfg := validConfig()
			cfg.HeartbeatInterval = time.Hour
			a, err := New(cfg, store, nil, nil, nil, nil)
			require.NoError(t, err)
			if tc.handedOver {
				a.mailbox.Put(handOver)
			}
			read := a.readAssigned(tc.since, func(string, int64) bool { return tc.accept })
			ctx := context.Background()
			first, err := read(ctx)
			if tc.ackReadErr != nil && !errors.Is(tc.ackReadErr, state.ErrConflict) {
				require.ErrorContains(t, err, "timeout", "an unreachable table is a failed read, backed off as any")
			} else {
				require.NoError(t, err)
			}
			if tc.wantAckReads == 1 && tc.ackReadErr == nil {
				require.Equal(t, int64(3), a.last.Load().AckVersion, "the agent's latest view holds its acknowledgement")
			}
			_, err = read(ctx) // the same hand-over again: tried once only
			require.NoError(t, err)
			require.Equal(t, tc.wantAckReads, store.ackReads.Load(), "read-acknowledgements")
			require.Equal(t, tc.wantGets, store.gets.Load(), "plain reads")
			if tc.wantAckReads == 1 && tc.ackReadErr == nil {
				require.Equal(t, "5", first.RunID)
				require.Equal(t, int64(3), first.Version)
				require.Equal(t, int64(0), first.AckVersion, "the item as it was before: served by no earlier agent")
			}
			require.NoError(t, a.ack(ctx, 3, time.Now()))
			require.Equal(t, tc.wantServeAcks, store.acks.Load(), "acknowledgements written by serving")
			require.NoError(t, a.ack(ctx, 3, time.Now()))
			require.Equal(t, tc.wantServeAcks+1, store.acks.Load(), "the read's acknowledgement counts for one serving only")
		})
	}
}

func TestMailboxLatest(t *testing.T) {
	t.Parallel()
	m := doorbell.NewMailbox()
	_, ok := m.Latest()
	require.False(t, ok)
	exp := time.Now().Add(time.Hour)
	m.Put(doorbell.HandOver{Run: "7", Version: 4, Kind: doorbell.KindRegistration, Secret: "a", ExpiresAt: exp})
	m.Put(doorbell.HandOver{Run: "8", Version: 9, Kind: doorbell.KindRegistration, Secret: "b", ExpiresAt: exp})
	h, ok := m.Latest()
	require.True(t, ok)
	require.Equal(t, int64(9), h.Version)
	h, ok = m.Latest()
	require.True(t, ok, "Latest takes nothing")
	require.Equal(t, "8", h.Run)
	_, ok = m.Take("8", 9, doorbell.KindRegistration, state.SecretSum("b"))
	require.True(t, ok)
	h, ok = m.Latest()
	require.True(t, ok, "a version says nothing of a hand-over's worth: the older one stays")
	require.Equal(t, "7", h.Run)
}

// TestMailboxRefusesWhatTheAssignmentDoesNotName: a hand-over pushed into the doorbell by anyone
// but whoever wrote the assignment (its secret is not the one the assignment's sum names) is
// refused and reported, whether it came before or after the real one, and a flood of them for a
// later version does not push the real one out.
func TestMailboxRefusesWhatTheAssignmentDoesNotName(t *testing.T) {
	t.Parallel()
	var refused []doorbell.HandOver
	m := doorbell.NewMailbox()
	m.Refused = func(h doorbell.HandOver) { refused = append(refused, h) }
	forged := doorbell.HandOver{Run: "j77", Version: 5, Kind: doorbell.KindJIT, Secret: "the attacker's runner"}
	real := doorbell.HandOver{Run: "j77", Version: 5, Kind: doorbell.KindJIT, Secret: "the job's runner"}
	m.Put(forged)
	m.Put(doorbell.HandOver{Run: "j77", Version: 99, Kind: doorbell.KindJIT, Secret: "a later version, forged"})
	m.Put(real)
	m.Put(forged) // again, after the real one
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := m.Wait(ctx, "j77", 5, doorbell.KindJIT, state.SecretSum(real.Secret))
	require.NoError(t, err)
	require.Equal(t, real, h, "the hand-over whose secret the assignment names, and no other")
	require.Equal(t, []doorbell.HandOver{forged}, refused, "the forged one is refused and reported (held once)")

	_, ok := m.Take("j77", 5, doorbell.KindJIT, "")
	require.False(t, ok, "an assignment that names no secret takes no hand-over")
}
