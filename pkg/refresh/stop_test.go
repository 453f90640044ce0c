package refresh_test

import (
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/refresh"
)

// TestStopLosingToAClaimStopsNothing: a claim lands between refresh's read of the idle set and
// its idle → stopped write. The write comes first and loses, so EC2 is never asked to stop the
// instance: the run that claimed it gets a running machine.
func TestStopLosingToAClaimStopsNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t, warm(0, 1))
	in := r.AddIdle(t, fake.Idle{}) // warm and ready: the schedule wants it stopped
	r.Store.StealBefore(in.ID, "6310", state.Stopped)

	rep := r.refresh(refresh.Config{})
	require.True(t, r.Store.Stolen(in.ID), "the claim landed between refresh's read and its write")
	require.Zero(t, rep.Pools[0].Stops, "refresh stopped nothing it did not win")
	it := r.Store.Item(in.ID)
	require.Equal(t, state.Claimed, it.State)
	require.Equal(t, "6310", it.RunID)
	require.Equal(t, ec2types.InstanceStateNameRunning, r.EC2.State(in.ID), "the claimed instance keeps running: a lost write never reaches EC2")
	require.Zero(t, r.EC2.Calls("StopInstances"))
	require.Zero(t, r.EC2.Calls("TerminateInstances"), "nor is it trimmed")
}

// TestStopWaitsForAFinishedRun: an idle instance whose agent has not yet signalled DEREGISTERED
// for its last run (still deregistering, still cleaning) is not stopped; once it has, it is.
func TestStopWaitsForAFinishedRun(t *testing.T) {
	t.Parallel()
	r := newRig(t, warm(0, 1))
	in := r.AddIdle(t, fake.Idle{Served: []string{"octo/app"}, LastRun: "6311"})
	// Released, with the agent held back: the item is idle with lastRunId 6311 while the
	// agent's last word is still REGISTERED.
	r.Agent.Behave(in.ID, fake.NoDeregister)
	busy := *in
	busy.Signal, busy.SignalRun, busy.SignalVersion = state.SignalRegistered, "6311", in.Version-1
	r.Store.Put(busy)

	rep := r.refresh(refresh.Config{})
	require.Zero(t, rep.Pools[0].Stops, "an instance still busy with its last run is not stopped")
	require.Zero(t, rep.Pools[0].Launched, "nor replaced: it is on its way")
	it := r.Store.Item(in.ID)
	require.Equal(t, state.Idle, it.State)
	require.Equal(t, state.SignalRegistered, it.Signal)
	require.Equal(t, ec2types.InstanceStateNameRunning, r.EC2.State(in.ID))

	r.Agent.Behave(in.ID, fake.Register) // the agent finishes with the run
	r.waitFor("the agent's DEREGISTERED", func(items map[string]*state.Instance) bool {
		return items[in.ID].SignalFor(state.SignalDeregistered, "6311", in.Version)
	})
	rep = r.refresh(refresh.Config{})
	require.Equal(t, 1, rep.Pools[0].Stops, "once DEREGISTERED, it is stopped")
	it = r.Store.Item(in.ID)
	require.Equal(t, state.Stopped, it.State)
	require.Equal(t, ec2types.InstanceStateNameStopped, r.EC2.State(in.ID))
	require.Equal(t, []string{in.ID}, r.Offered(t), "offered as stopped, once")
}

// TestRegisterFailedIdleTerminated: an idle instance whose last word is REGISTER_FAILED is not
// kept in the pool: refresh terminates it.
func TestRegisterFailedIdleTerminated(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	in := r.AddHeld(t, fake.Held{Run: "6312", Claimed: true, Agent: fake.Silent})
	failed := *in // its agent could not register the runner
	failed.Signal, failed.SignalRun, failed.SignalVersion = state.SignalRegisterFailed, "6312", in.Version
	failed.SignalLog = "config.sh: runner registration failed: 404"
	r.Store.Put(failed)
	_, err := r.Store.Transition(r.ctx, state.Change{InstanceID: in.ID, Pool: in.Pool, From: state.Claimed, To: state.Idle, Version: in.Version,
		RunID: "6312", RegisterFailed: true, Threshold: time.Now().Add(10 * time.Minute), Reason: "its runner did not register"})
	require.NoError(t, err)

	r.refresh(refresh.Config{})
	it := r.Store.Item(in.ID)
	require.Equal(t, state.Terminated, it.State)
	require.Contains(t, it.StateReason, "runner registration failed")
	require.Equal(t, ec2types.InstanceStateNameTerminated, r.EC2.State(in.ID))
}
