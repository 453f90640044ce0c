package pool_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// These tests run lifecycle on the in-memory fakes (internal/testkit/fake), under -short.

func TestFakeRetireEndsWhatItHoldsAndLeavesWhatMovedOn(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	mine := w.AddIdle(t, fake.Idle{})
	moved := w.AddIdle(t, fake.Idle{})
	stale := *moved
	stale.Version-- // someone moved it after this copy was read
	other := w.AddIdle(t, fake.Idle{})
	// The batch is refused (as when one of its instances is gone already): each is retried alone.
	w.EC2.Inject("TerminateInstances", fake.APIError("InvalidInstanceID.NotFound", "one of them is gone"))

	r := &pool.Retirer{Store: w.Store, EC2: w.EC2, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	res := r.Retire(context.Background(), []state.Instance{*mine, stale, *other}, pool.Because("test"))
	require.NoError(t, res.Err)
	require.ElementsMatch(t, []string{mine.ID, other.ID}, ids(res.Ended))
	require.Equal(t, []string{moved.ID}, ids(res.Lost))
	require.Equal(t, state.Terminated, w.Store.Item(mine.ID).State)
	require.Equal(t, state.Idle, w.Store.Item(moved.ID).State, "left to whoever moved it")
	require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(mine.ID), "terminated alone after the batch failed")
	require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(other.ID))
	require.Equal(t, 3, w.EC2.Calls("TerminateInstances"), "one batch, then one request each")
	require.Equal(t, ec2types.InstanceStateNameRunning, w.EC2.State(moved.ID))
}

func TestFakeRecordWritesItemsAndUntags(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	w.Agent.Default = fake.Silent
	launched, err := w.Launcher.Launch(context.Background(), fleet.Request{Pool: w.Doc, Count: 2,
		Reserved: fleet.ForWarmPool(fake.Stack, w.Doc.Name)})
	require.NoError(t, err)

	r := &pool.Recorder{Store: w.Store, EC2: w.EC2}
	items, err := r.Record(context.Background(), pool.Launch{Pool: w.Doc, Instances: launched, At: time.Now(), Reason: "warm pool"})
	require.NoError(t, err)
	require.Len(t, items, 2)
	for _, in := range launched {
		it := w.Store.Item(in.ID)
		require.NotNil(t, it, in.ID)
		require.Equal(t, state.Created, it.State)
		require.EqualValues(t, 1, it.Version)
		require.Equal(t, w.Doc.SpecHash, it.SpecHash)
		require.NotContains(t, w.EC2.Tags(in.ID), fleet.TagUnrecorded)
	}
}
