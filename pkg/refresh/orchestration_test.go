package refresh_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/refresh"
)

// These tests run refresh's orchestration on the in-memory fakes (internal/testkit/fake): no
// emulator, no agent process.

func fakeRefresh(t *testing.T, w *fake.World) *refresh.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := refresh.Run(ctx, refresh.Config{Stack: fake.Stack, Pools: []*pooldoc.Document{w.Doc}},
		refresh.Deps{Store: w.Store, Pool: w.Pool, Pools: w.Pools, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	require.Empty(t, rep.Errors)
	return rep
}

func TestFakeExpiredInstancesAreTerminated(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	expired := w.AddIdle(t, fake.Idle{Served: []string{"octo/app"}, LastRun: "100", Deadline: time.Now().Add(-time.Minute)})
	live := w.AddIdle(t, fake.Idle{Served: []string{"octo/app"}, LastRun: "101"})

	rep := fakeRefresh(t, w)
	require.Equal(t, 1, rep.Pools[0].Expired)
	require.Equal(t, state.Terminated, w.Store.Item(expired.ID).State)
	require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(expired.ID))
	require.Equal(t, state.Idle, w.Store.Item(live.ID).State, "within its deadline: kept")
	require.Equal(t, ec2types.InstanceStateNameRunning, w.EC2.State(live.ID))
	require.Equal(t, []string{live.ID}, w.Offered(t), "the expired instance's offer is tidied away")
}

func TestFakeWarmPoolIsFilledThenPromoted(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, fake.Pool(t, "linux", func(doc map[string]any) {
		doc["warm"] = map[string]any{"schedules": []map[string]any{{"name": "always", "hot": 2, "stopped": 0}}}
	}))
	w.AddIdle(t, fake.Idle{}) // one of the two is there already

	rep := fakeRefresh(t, w)
	require.Equal(t, 1, rep.Pools[0].Launched, "filled up to the target of 2")
	var warm []string
	for id, in := range w.Store.Items() {
		if in.State == state.Created {
			require.Empty(t, in.RunID, "a warm instance serves no run yet")
			require.Equal(t, "true", w.EC2.Tags(id)[fleet.TagWarm])
			require.NotContains(t, w.EC2.Tags(id), fleet.TagUnrecorded, "recorded")
			warm = append(warm, id)
		}
	}
	require.Len(t, warm, 1)

	// Its agent boots and says READY; the next refresh promotes it and launches nothing more.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, w.Store.Wait(ctx, func(items map[string]*state.Instance) bool {
		return items[warm[0]].Signal == state.SignalReady
	}))
	rep = fakeRefresh(t, w)
	require.Zero(t, rep.Pools[0].Launched)
	require.Equal(t, 2, rep.Pools[0].Idle)
	require.Equal(t, state.Idle, w.Store.Item(warm[0]).State)
	require.Contains(t, w.Offered(t), warm[0], "offered once promoted")
	require.Len(t, w.Offered(t), 2)
}

func TestFakeOrphansAreTerminatedAndRecordedOnesUntagged(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	tags := fleet.ForWarmPool(fake.Stack, w.Doc.Name)
	tags[fleet.TagUnrecorded] = "true"
	orphan, young := "i-0000000000000a001", "i-0000000000000a002"
	w.EC2.Launch(orphan, "c7i.large", tags, time.Now().Add(-time.Hour))
	w.EC2.Launch(young, "c7i.large", tags, time.Now())                                // provision may be recording it right now
	recorded := w.AddIdle(t, fake.Idle{Served: []string{"octo/app"}, LastRun: "100"}) // served a run: no trim
	w.EC2.Launch(recorded.ID, "c7i.large", tags, time.Now().Add(-time.Hour))          // its untagging failed

	rep := fakeRefresh(t, w)
	require.Equal(t, 1, rep.Orphans)
	require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(orphan))
	require.Equal(t, ec2types.InstanceStateNameRunning, w.EC2.State(young), "within the grace: left alone")
	require.Equal(t, ec2types.InstanceStateNameRunning, w.EC2.State(recorded.ID))
	require.NotContains(t, w.EC2.Tags(recorded.ID), fleet.TagUnrecorded, "recorded: untagged")
	require.Equal(t, state.Idle, w.Store.Item(recorded.ID).State)
}

// TestFakeDrainedPoolKeepsNothingWarm: a drained pool whose schedule wants instances hot gets
// none: refresh launches nothing and retires the idle ones, whose offers it deletes.
func TestFakeDrainedPoolKeepsNothingWarm(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, fake.Pool(t, "linux", func(doc map[string]any) {
		doc["warm"] = map[string]any{"schedules": []map[string]any{{"name": "always", "hot": 2, "stopped": 0}}}
		doc["drained"] = true
	}))
	idle := w.AddIdle(t, fake.Idle{})

	rep := fakeRefresh(t, w)
	require.Zero(t, rep.Pools[0].Launched, "nothing is kept warm")
	require.Equal(t, pooldoc.Target{Schedule: "drained"}, rep.Pools[0].Target)
	require.Equal(t, state.Terminated, w.Store.Item(idle.ID).State)
	require.Empty(t, w.Offered(t), "nothing of a drained pool is offered")
}
