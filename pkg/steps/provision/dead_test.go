package provision_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
)

// clock is a clock a test moves forward (provision.Deps.Now): real time plus an offset.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// TestDeadAgentReplaced: of three pooled instances claimed for a run, one agent is cut off (it
// can neither see the claim nor answer). Its instance is terminated and replaced once the
// acknowledgement bound passes, while the other two keep their claims; the provision succeeds.
func TestDeadAgentReplaced(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	var pooled []string
	for range 3 {
		pooled = append(pooled, w.AddIdle(t, fake.Idle{Served: []string{fakeRepo}, LastRun: "7601"}).ID)
	}
	dead := pooled[1]
	w.Agent.Behave(dead, fake.Silent)
	clk := &clock{}
	deps := fakeDeps(t, w)
	deps.Now = clk.Now
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	type outcome struct {
		res *provision.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := provision.Run(ctx, fakeConfig(w, "7602", 3), deps)
		done <- outcome{res, err}
	}()
	// The live two register and run; the dead one stays claimed, unacknowledged, and is not
	// replaced before its bound.
	require.NoError(t, w.Store.Wait(ctx, func(items map[string]*state.Instance) bool {
		live := 0
		for _, id := range []string{pooled[0], pooled[2]} {
			if it := items[id]; it.State == state.Running && it.RunID == "7602" {
				live++
			}
		}
		it := items[dead]
		return live == 2 && it.State == state.Claimed && it.RunID == "7602"
	}))
	it := w.Store.Item(dead)
	require.Less(t, it.AckVersion, it.Version, "the dead agent never acknowledged")
	select {
	case o := <-done:
		t.Fatalf("provision ended before the acknowledgement bound: %+v, %v", o.res, o.err)
	default:
	}
	clk.Advance(state.AckTimeout + time.Second)

	var got outcome
	select {
	case got = <-done:
	case <-ctx.Done():
		t.Fatal("provision still waiting after the acknowledgement bound passed")
	}
	require.NoError(t, got.err)
	res := got.res
	require.Equal(t, 1, res.Replaced)
	require.Equal(t, 2, res.Reused, "the two live instances keep their claims")
	require.Equal(t, 1, res.Created)
	require.NotContains(t, resultIDs(res), dead)
	require.Len(t, res.Failures, 1)
	require.Equal(t, dead, res.Failures[0].ID)
	requireHeld(t, w, "7602", resultIDs(res)...)
	// Replaced at the acknowledgement bound (30 s), not at the registration timeout (a minute
	// here), which would have failed the provision instead.
	it = w.Store.Item(dead)
	require.Equal(t, state.Terminated, it.State)
	require.Contains(t, it.StateReason, "no sign of life within 30s of the claim")
	require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(dead))
}

// TestStaleHeartbeatNotClaimed: an idle instance whose agent last heartbeat minutes ago is not
// claimed (the claim's condition refuses it); the run gets a fresh instance instead.
func TestStaleHeartbeatNotClaimed(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	stale := w.AddIdle(t, fake.Idle{Served: []string{fakeRepo}, LastRun: "7611", Stale: true})

	res := mustRun(t, w, "7612", 1)
	require.Equal(t, 1, res.Created)
	require.Zero(t, res.Reused)
	require.NotEqual(t, stale.ID, res.Instances[0].ID)
	it := w.Store.Item(stale.ID)
	require.Equal(t, state.Idle, it.State, "left for refresh, which terminates it for its stale heartbeat")
	require.Equal(t, stale.Version, it.Version, "not written")
	require.Empty(t, it.RunID)
	requireHeld(t, w, "7612", resultIDs(res)...)
}
