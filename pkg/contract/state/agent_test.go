package state_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

func newAgent(t *testing.T, s *state.Store, id string) *state.Agent {
	t.Helper()
	a, err := state.NewAgent(testbed.DynamoDB(t), s.Table(), account.ARN(id), "v-test")
	require.NoError(t, err)
	return a
}

// TestAgentWritesOnlyItsAttributes: signals and heartbeats change the agent's attributes and
// nothing else of the item.
func TestAgentWritesOnlyItsAttributes(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := testbed.Context(t, time.Minute)
	in := reach(t, s, state.Claimed, "555")
	a := newAgent(t, s, in.ID)

	at := later(0)
	hb, err := a.Heartbeat(ctx, at)
	require.NoError(t, err)
	require.Equal(t, at, hb.HeartbeatAt, "a heartbeat returns the item it wrote")
	require.Equal(t, in.RunID, hb.RunID)
	require.NoError(t, a.Signal(ctx, state.Signal{Name: state.SignalRegistered, Run: "555", Version: in.Version, At: at}))

	got, err := a.Get(ctx)
	require.NoError(t, err)
	want := *in
	want.Report = state.Report{Signal: state.SignalRegistered, SignalRun: "555", SignalVersion: in.Version,
		SignalAt: at, HeartbeatAt: at, AgentVersion: "v-test"}
	require.Equal(t, &want, got, "only agent attributes changed")
	require.True(t, got.SignalFor(state.SignalRegistered, "555", in.Version))
	require.False(t, got.SignalFor(state.SignalRegistered, "555", in.Version+1), "a signal about an older version does not count")
}

// TestDeregisteredCarriesHowLongItTook: DEREGISTERED records how long the agent took (deregMs),
// REGISTERED likewise (regMs); each outlasts the later signals and the next claim, and a signal
// without it leaves it alone.
func TestDeregisteredCarriesHowLongItTook(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := testbed.Context(t, time.Minute)
	in := reach(t, s, state.Claimed, "557")
	a := newAgent(t, s, in.ID)
	idle := move(t, s, in, state.Idle, "")
	require.NoError(t, a.Signal(ctx, state.Signal{Name: state.SignalDeregistered, Run: "557", Version: idle.Version, Took: 137 * time.Millisecond}))
	got, err := a.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(137), got.DeregisterMs)

	claimed, err := s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: testPool, From: state.Idle, To: state.Claimed, Version: got.Version,
		Threshold: time.Now().Add(time.Hour), Reuse: state.ReuseAny, Assign: &state.Assignment{RunID: "558", RunAttempt: 1, Repo: "octo/app"}})
	require.NoError(t, err)
	require.NoError(t, a.Signal(ctx, state.Signal{Name: state.SignalRegistered, Run: "558", Version: claimed.Version, Took: time.Second}))
	got, err = a.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(137), got.DeregisterMs, "kept across the claim; only DEREGISTERED writes it")
	require.Equal(t, int64(1000), got.RegisterMs, "REGISTERED records regMs")

	idle = move(t, s, got, state.Idle, "")
	require.NoError(t, a.Signal(ctx, state.Signal{Name: state.SignalDeregistered, Run: "558", Version: idle.Version}))
	got, err = a.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(137), got.DeregisterMs, "a signal without a time leaves deregMs")
	require.Equal(t, int64(1000), got.RegisterMs, "and regMs, across the release")
}

// TestAgentSignalAboutStaleVersionRefused: once the control plane has moved the item, a signal
// about the old version is refused.
func TestAgentSignalAboutStaleVersionRefused(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := testbed.Context(t, time.Minute)
	in := reach(t, s, state.Claimed, "556")
	a := newAgent(t, s, in.ID)
	moved := move(t, s, in, state.Idle, "")

	err := a.Signal(ctx, state.Signal{Name: state.SignalRegistered, Run: "556", Version: in.Version})
	require.ErrorIs(t, err, state.ErrConflict)
	require.Contains(t, err.Error(), "idle (version")
	got, err := a.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, moved, got, "nothing written")
}

// TestAgentNeverCreatesItems: writes for an instance without an item fail with ErrNotFound and
// leave no item behind.
func TestAgentNeverCreatesItems(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := testbed.Context(t, time.Minute)
	id := newID()
	a := newAgent(t, s, id)
	_, err := a.Heartbeat(ctx, time.Now())
	require.ErrorIs(t, err, state.ErrNotFound)
	require.ErrorIs(t, a.Signal(ctx, state.Signal{Name: state.SignalReady, Version: 1}), state.ErrNotFound)
	_, err = s.Get(ctx, id)
	require.ErrorIs(t, err, state.ErrNotFound)
}

// TestSignalValidation: malformed signals are refused before any request.
func TestSignalValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		sig  state.Signal
		want string
	}{
		{"unknown", state.Signal{Name: "DONE", Version: 1}, `signal "DONE" is unknown`},
		{"registered without run", state.Signal{Name: state.SignalRegistered, Version: 1}, "run id is empty"},
		{"bad run", state.Signal{Name: state.SignalDeregistered, Run: "abc", Version: 1}, `run id "abc" is malformed`},
		{"ready with run", state.Signal{Name: state.SignalReady, Run: "1", Version: 1}, "about no run"},
		{"no version", state.Signal{Name: state.SignalReady}, "version 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.sig.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestLogTail(t *testing.T) {
	t.Parallel()
	require.Equal(t, "abc", state.LogTail("abc", 10))
	require.Equal(t, "789", state.LogTail("123456789", 3))
	// "é" is two bytes; a cut inside it drops the partial rune.
	tail := state.LogTail("aé"+strings.Repeat("x", 3), 4)
	require.Equal(t, "xxx", tail)
	long := state.LogTail(strings.Repeat("é", 5000), state.MaxLogTail)
	require.LessOrEqual(t, len(long), state.MaxLogTail)
	require.True(t, strings.HasPrefix(long, "é"))
}

// TestAskIsConditionalOnTheVersion: the agent's request for a hand-over is written with its
// acknowledgement, counts, and is refused once the item has left the version it asks about.
func TestAskIsConditionalOnTheVersion(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := testbed.Context(t, 30*time.Second)
	in := reach(t, s, state.Claimed, "91")
	agent, err := state.NewAgent(db, s.Table(), in.ARN, "test")
	require.NoError(t, err)
	require.NoError(t, agent.Ask(ctx, in.Version, 1, time.Now()))
	require.NoError(t, agent.Ask(ctx, in.Version, 2, time.Now()))
	got, err := s.Get(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, in.Version, got.AskVersion)
	require.Equal(t, 2, got.Asks)
	require.Equal(t, in.Version, got.AckVersion, "an ask acknowledges the assignment too")
	require.ErrorIs(t, agent.Ask(ctx, in.Version-1, 3, time.Now()), state.ErrConflict, "a version the item has left")
	require.ErrorContains(t, agent.Ask(ctx, in.Version, 0, time.Now()), "request count from 1")
}

// TestUnacknowledgedGiveBack: a claim is given back unacknowledged only while its agent has not
// acknowledged it, and an agent cannot acknowledge a version the item has left, so exactly one
// of the two wins.
func TestUnacknowledgedGiveBack(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := testbed.Context(t, time.Minute)
	giveBack := func(in *state.Instance, run string) (*state.Instance, error) {
		return s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: in.Pool, From: state.Claimed, To: state.Idle, Version: in.Version,
			RunID: run, Unacknowledged: true, Threshold: later(time.Hour)})
	}

	// Given back first: the agent's acknowledgement of the claim then fails.
	in := reach(t, s, state.Claimed, "557")
	a := newAgent(t, s, in.ID)
	require.ErrorIs(t, a.Ack(ctx, in.Version-1, time.Now()), state.ErrConflict, "an acknowledgement of an older version")
	idle, err := giveBack(in, "557")
	require.NoError(t, err)
	require.Equal(t, state.Idle, idle.State)
	require.Empty(t, idle.RunID)
	require.Equal(t, in.LastRunID, idle.LastRunID, "a claim never acknowledged served nothing: the last run stays")
	require.ErrorIs(t, a.Ack(ctx, in.Version, time.Now()), state.ErrConflict, "the claim is gone: the agent must not serve it")
	got, err := a.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(0), got.AckVersion)

	// Acknowledged first: the unacknowledged give-back loses, and says what the item is now.
	in = reach(t, s, state.Claimed, "558")
	a = newAgent(t, s, in.ID)
	require.NoError(t, a.Ack(ctx, in.Version, time.Now()))
	_, err = giveBack(in, "558")
	var conflict *state.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, in.Version, conflict.Current.AckVersion)
	require.Equal(t, state.Claimed, conflict.Current.State)

	// An instance that served a run before (its agent acknowledged that claim) and is claimed
	// again: the new claim, unacknowledged, goes back, and the last run it served stays.
	first := reach(t, s, state.Claimed, "5600")
	a = newAgent(t, s, first.ID)
	require.NoError(t, a.Ack(ctx, first.Version, time.Now()))
	served := move(t, s, move(t, s, first, state.Running, "5600"), state.Idle, "")
	again := move(t, s, served, state.Claimed, "5601")
	back, err := giveBack(again, "5601")
	require.NoError(t, err)
	require.Equal(t, "5600", back.LastRunID)
	require.Equal(t, first.Version, back.AckVersion)

	// Only a claim can be given back unacknowledged.
	run := reach(t, s, state.Running, "559")
	_, err = s.Transition(ctx, state.Change{InstanceID: run.ID, Pool: run.Pool, From: state.Running, To: state.Idle, Version: run.Version,
		RunID: "559", Unacknowledged: true, Threshold: later(time.Hour)})
	require.ErrorContains(t, err, "only a claim its agent has not acknowledged")
}

// TestAckReadReturnsTheItemBeforeTheAcknowledgement: the read-and-acknowledge of a handed-over
// assignment writes ackVersion and a heartbeat, returns the item as it was (an earlier
// acknowledgement shows), and is refused for another run or version; a claim it acknowledged is
// no longer given back unacknowledged.
func TestAckReadReturnsTheItemBeforeTheAcknowledgement(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := testbed.Context(t, 30*time.Second)
	in := reach(t, s, state.Claimed, "731")
	a := newAgent(t, s, in.ID)
	at := time.Now().Truncate(time.Millisecond)

	for _, tc := range []struct {
		name    string
		run     string
		version int64
	}{{"another run", "732", in.Version}, {"an older version", "731", in.Version - 1}, {"a newer version", "731", in.Version + 1}} {
		_, err := a.AckRead(ctx, tc.run, tc.version, at)
		require.ErrorIs(t, err, state.ErrConflict, tc.name)
	}
	_, err := a.AckRead(ctx, "", in.Version, at)
	require.ErrorContains(t, err, "want the run and version")

	before, err := a.AckRead(ctx, "731", in.Version, at)
	require.NoError(t, err)
	require.Equal(t, "731", before.RunID)
	require.Equal(t, in.Version, before.Version)
	require.Equal(t, int64(0), before.AckVersion, "the item as it was: not acknowledged yet")
	got, err := a.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, in.Version, got.AckVersion, "acknowledged")
	require.Equal(t, in.Version, got.Version, "an acknowledgement is not a transition")
	require.True(t, got.HeartbeatAt.Equal(at), "with a heartbeat: %s", got.HeartbeatAt)

	again, err := a.AckRead(ctx, "731", in.Version, at)
	require.NoError(t, err)
	require.Equal(t, in.Version, again.AckVersion, "a second agent of the instance sees the first one's acknowledgement")

	_, err = s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: in.Pool, From: state.Claimed, To: state.Idle, Version: in.Version,
		RunID: "731", Unacknowledged: true, Threshold: later(time.Hour)})
	require.ErrorIs(t, err, state.ErrConflict, "acknowledged: never given back as unacknowledged")
}
