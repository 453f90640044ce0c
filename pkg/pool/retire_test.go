package pool_test

import (
	"fmt"
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// TestRetireOnlyWhatItWon: of three instances, one is retired, one was claimed by another run
// after it was read (the lost write must never reach EC2), and one was terminated already.
func TestRetireOnlyWhatItWon(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	won, taken, gone := *w.AddIdle(t, fake.Idle{}), *w.AddIdle(t, fake.Idle{}), *w.AddIdle(t, fake.Idle{})
	claimedByOther, err := w.Store.Transition(ctx(t), state.Change{InstanceID: taken.ID, Pool: taken.Pool, From: state.Idle, To: state.Claimed,
		Version: taken.Version, Threshold: time.Now().Add(time.Hour), Assign: &state.Assignment{RunID: "77", RunAttempt: 1, Repo: "octo/other"}})
	require.NoError(t, err)
	_, err = w.Store.Transition(ctx(t), state.Change{InstanceID: gone.ID, Pool: gone.Pool, From: state.Idle, To: state.Terminated,
		Version: gone.Version, Reason: "expired"})
	require.NoError(t, err)

	res := w.Pool.Retire(ctx(t), []state.Instance{won, taken, gone}, pool.Because("test"))
	require.NoError(t, res.Err)
	require.Equal(t, []string{won.ID}, instanceIDs(res.Ended))
	require.Equal(t, []string{gone.ID}, instanceIDs(res.Already))
	require.Len(t, res.Lost, 1)
	require.Equal(t, state.Claimed, res.Lost[0].State, "Lost holds the instance as the winner left it")
	require.Equal(t, "77", res.Lost[0].RunID)
	require.Equal(t, 1, w.EC2.Calls("TerminateInstances"), "one request for all that were won or already ended")
	require.Equal(t, state.Terminated, w.Store.Item(won.ID).State)
	require.Equal(t, "test", w.Store.Item(won.ID).StateReason)
	require.Equal(t, state.Claimed, w.Store.Item(taken.ID).State, "the other run keeps its instance")
	require.Equal(t, claimedByOther.Version, w.Store.Item(taken.ID).Version)
	require.Equal(t, ec2types.InstanceStateNameRunning, w.EC2.State(taken.ID), "a lost write never reaches TerminateInstances")
	require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(won.ID))
	require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(gone.ID), "terminating twice is harmless")
}

// TestRetireWithAStaleCopy: a copy read before someone moved the instance loses its write and
// leaves the instance to them; a batch EC2 refuses (one of its instances is gone) is retried one
// by one.
func TestRetireWithAStaleCopy(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	mine := w.AddIdle(t, fake.Idle{})
	moved := w.AddIdle(t, fake.Idle{})
	stale := *moved
	stale.Version-- // someone moved it after this copy was read
	other := w.AddIdle(t, fake.Idle{})
	w.EC2.Inject("TerminateInstances", fake.APIError("InvalidInstanceID.NotFound", "one of them is gone"))

	res := w.Pool.Retire(ctx(t), []state.Instance{*mine, stale, *other}, pool.Because("test"))
	require.NoError(t, res.Err)
	require.ElementsMatch(t, []string{mine.ID, other.ID}, instanceIDs(res.Ended))
	require.Equal(t, []string{moved.ID}, instanceIDs(res.Lost))
	require.Equal(t, state.Idle, w.Store.Item(moved.ID).State, "left to whoever moved it")
	require.Equal(t, ec2types.InstanceStateNameRunning, w.EC2.State(moved.ID))
	require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(mine.ID), "terminated alone after the batch failed")
	require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(other.ID))
	require.Equal(t, 3, w.EC2.Calls("TerminateInstances"), "one batch, then one request each")
}

// TestRetireStoreDown: when the store refuses the marks, the failure is reported and nothing that
// was not marked reaches EC2.
func TestRetireStoreDown(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	in := w.AddIdle(t, fake.Idle{})
	w.Store.Inject("Transition", fake.APIError("InternalServerError", "dynamodb is down"))

	res := w.Pool.Retire(ctx(t), []state.Instance{*in}, pool.Because("x"))
	require.ErrorContains(t, res.Err, "dynamodb is down")
	require.Empty(t, res.Ended)
	require.Zero(t, w.EC2.Calls("TerminateInstances"), "an instance whose item was not marked is not terminated")
	require.Equal(t, state.Idle, w.Store.Item(in.ID).State)
}

// TestMarkTerminated: an event marks the item whatever live state it is in, deletes its doorbell
// and asks nothing of EC2; an unknown or already terminated instance is left alone.
func TestMarkTerminated(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	in := w.AddIdle(t, fake.Idle{})

	marked, err := w.Pool.MarkTerminated(ctx(t), in.ID, "spot interruption warning")
	require.NoError(t, err)
	require.NotNil(t, marked)
	require.Equal(t, state.Terminated, w.Store.Item(in.ID).State)
	require.Zero(t, w.EC2.Calls("TerminateInstances"), "EC2 is ending the machine already")
	require.Equal(t, 1, w.SQS.Calls("DeleteQueue"), "its doorbell deleted")
	again, err := w.Pool.MarkTerminated(ctx(t), in.ID, "again")
	require.NoError(t, err)
	require.Nil(t, again)
	unknown, err := w.Pool.MarkTerminated(ctx(t), "i-0123456789abcdef0", "x")
	require.NoError(t, err)
	require.Nil(t, unknown)
	_, err = w.Pool.MarkTerminated(ctx(t), "not-an-id", "x")
	require.ErrorContains(t, err, "malformed")
}

// TestTerminateBulkThenSingles: a batch that fails is retried instance by instance; an instance
// already gone is fine, a refused one is reported, and the others are terminated either way.
func TestTerminateBulkThenSingles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		n         int
		gone, bad int // the index of the instance gone, refused (-1: none)
		calls     int
		wantErr   string
	}{
		{"all fine: one request", 3, -1, -1, 1, ""},
		{"one gone: singles, no error", 3, 1, -1, 4, ""},
		{"one refused: singles, reported", 3, -1, 2, 4, "UnauthorizedOperation"},
		{"single gone", 1, 0, -1, 1, ""},
		{"nothing", 0, -1, -1, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := fake.NewWorld(t, nil)
			ids := make([]string, tc.n)
			for i := range ids {
				ids[i] = w.AddIdle(t, fake.Idle{}).ID
			}
			if tc.gone >= 0 {
				ids[tc.gone] = "i-0000000000000dead" // EC2 does not know it
			}
			if tc.bad >= 0 {
				w.EC2.Refuse("TerminateInstances", ids[tc.bad], fake.APIError("UnauthorizedOperation", "not yours"))
			}
			err := w.Pool.Terminate(ctx(t), ids)
			if tc.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tc.wantErr)
			}
			require.Equal(t, tc.calls, w.EC2.Calls("TerminateInstances"))
			for i, id := range ids {
				if i == tc.gone || i == tc.bad {
					continue
				}
				require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(id), "terminated whatever became of the others")
			}
			if tc.bad >= 0 {
				require.Equal(t, ec2types.InstanceStateNameRunning, w.EC2.State(ids[tc.bad]))
			}
		})
	}
}

// TestTerminateBatches: more than 500 instances go in requests of at most 500.
func TestTerminateBatches(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	ids := make([]string, 1001)
	for i := range ids {
		ids[i] = fmt.Sprintf("i-%017x", 0xb0000000000+i)
		w.EC2.Launch(ids[i], "c7i.large", nil, time.Now())
	}
	require.NoError(t, w.Pool.Terminate(ctx(t), ids))
	require.Equal(t, 3, w.EC2.Calls("TerminateInstances"), "500, 500 and 1")
	require.Len(t, w.EC2.InState(ec2types.InstanceStateNameTerminated), 1001)
}
