package pool_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// TestRecordWritesItemsThenUntags: every launched instance gets an item in created, with its
// spec, its assignment and its doorbell, and loses the unrecorded tag; a cancelled caller does
// not stop the writes.
func TestRecordWritesItemsThenUntags(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	w.Agent.SetDefault(fake.Silent)
	launched, err := w.Launcher.Launch(ctx(t), fleet.Request{Pool: w.Doc, Count: 2, Reserved: fleet.ForRun(fake.Stack, w.Doc.Name, "42", "octo/app")})
	require.NoError(t, err)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	at := time.Now()

	items, err := w.Pool.Record(cancelled, pool.Launched{Pool: w.Doc, Instances: launched, At: at, Reason: "created for run 42",
		Assign: func(context.Context, string) (*state.Assignment, error) {
			return &state.Assignment{RunID: "42", RunAttempt: 1, Repo: "octo/app"}, nil
		}})
	require.NoError(t, err)
	require.Len(t, items, 2)
	for _, l := range launched {
		it := w.Store.Item(l.ID)
		require.NotNil(t, it, l.ID)
		require.Equal(t, state.Created, it.State)
		require.EqualValues(t, 1, it.Version)
		require.Equal(t, "42", it.RunID)
		require.Equal(t, w.Doc.SpecHash, it.SpecHash)
		require.Equal(t, l.Type, it.InstanceType)
		require.Equal(t, w.Bells.URL(l.ID), it.Bell)
		require.WithinDuration(t, at.Add(w.Doc.Timeout(state.Created)), it.Threshold, time.Second)
		require.NotContains(t, w.EC2.Tags(l.ID), fleet.TagUnrecorded, "the tag goes once the item exists")
	}
	require.Equal(t, len(launched), w.SQS.Calls("CreateQueue"), "a doorbell each")
}

// TestRecordWithoutItsUntag: an untag EC2 refuses is only logged: the items are written, and the
// tag stays for refresh to remove once it sees them.
func TestRecordWithoutItsUntag(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	w.Agent.SetDefault(fake.Silent)
	launched, err := w.Launcher.Launch(ctx(t), fleet.Request{Pool: w.Doc, Count: 1, Reserved: fleet.ForWarmPool(fake.Stack, w.Doc.Name)})
	require.NoError(t, err)
	w.EC2.Inject("DeleteTags", fake.APIError("RequestLimitExceeded", "slow down"))

	items, err := w.Pool.Record(ctx(t), pool.Launched{Pool: w.Doc, Instances: launched, At: time.Now(), Reason: "warm pool"})
	require.NoError(t, err)
	require.Len(t, items, 1)
	require.Equal(t, state.Created, w.Store.Item(launched[0].ID).State)
	require.Contains(t, w.EC2.Tags(launched[0].ID), fleet.TagUnrecorded)
}

// TestWarmLaunchesAndRecords: a warm launch records its instances with no run and hands nothing
// over.
func TestWarmLaunchesAndRecords(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	w.Agent.SetDefault(fake.Silent)
	n, err := w.Pool.Warm(ctx(t), w.Doc, 2, time.Now(), "hangar-warm-test", time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, 2, n)
	items := w.Store.Items()
	require.Len(t, items, 2)
	for id, it := range items {
		require.Equal(t, state.Created, it.State)
		require.Empty(t, it.RunID)
		require.Equal(t, "warm pool", it.StateReason)
		require.Equal(t, fake.Stack, w.EC2.Tags(id)[fleet.TagStack])
		require.Empty(t, w.SQS.Bodies(w.Bells.URL(id)), "nothing to hand over")
	}
}
