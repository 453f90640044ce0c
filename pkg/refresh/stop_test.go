package refresh_test

import (
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/refresh"
)

// TestStopLosingToAClaimStopsNothing: a claim lands between refresh's read of the idle set and
// its idle → stopped write. The write comes first and loses, so EC2 is never asked to stop the
// instance: the run that claimed it gets a running machine.
func TestStopLosingToAClaimStopsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, err := e.Launch(e.ctx, time.Time{})
	require.NoError(t, err)
	_, err = e.Warm(e.ctx, id)
	require.NoError(t, err)
	e.schedule(0, 1)

	rep := e.refreshRacingAClaim(id, "6310", state.Stopped)
	require.Zero(t, rep.Pools[0].Stops, "refresh stopped nothing it did not win")
}

// TestStopWaitsForAFinishedRun: an idle instance whose agent has not yet signalled DEREGISTERED
// for its last run (still deregistering, still cleaning) is not stopped; once it has, it is.
func TestStopWaitsForAFinishedRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, err := e.Launch(e.ctx, time.Time{})
	require.NoError(t, err)
	in, err := e.Warm(e.ctx, id)
	require.NoError(t, err)
	in, err = e.Claim(e.ctx, in, "6311")
	require.NoError(t, err)
	in, err = e.WaitSignal(e.ctx, id, state.SignalRegistered, "6311", in.Version)
	require.NoError(t, err)
	// Released without a remove token and with the agent held back: the item is idle with
	// lastRunId 6311 while the agent's last word is still REGISTERED.
	require.NoError(t, e.Sim.SetDynamoDB(id, false))
	in, err = e.Transition(e.ctx, state.Change{InstanceID: id, From: in.State, To: state.Idle, Version: in.Version, RunID: "6311"})
	require.NoError(t, err)
	require.NoError(t, e.Ring(e.ctx, in), "as release rings: the agent hears it but cannot read its item yet")
	require.Equal(t, state.SignalRegistered, in.Signal)
	e.schedule(0, 1)

	rep := e.refresh(refresh.Config{})
	require.Zero(t, rep.Pools[0].Stops, "an instance still busy with its last run is not stopped")
	it, err := e.Store.Get(e.ctx, id)
	require.NoError(t, err)
	require.Equal(t, state.Idle, it.State)
	st, err := e.InstanceState(e.ctx, id)
	require.NoError(t, err)
	require.Equal(t, ec2types.InstanceStateNameRunning, st)

	require.NoError(t, e.Sim.SetDynamoDB(id, true))
	_, err = e.WaitSignal(e.ctx, id, state.SignalDeregistered, "6311", in.Version)
	require.NoError(t, err)
	rep = e.refresh(refresh.Config{})
	require.Equal(t, 1, rep.Pools[0].Stops, "once DEREGISTERED, it is stopped")
	it, err = e.Store.Get(e.ctx, id)
	require.NoError(t, err)
	require.Equal(t, state.Stopped, it.State)
}

// TestRegisterFailedIdleTerminated: an idle instance whose last word is REGISTER_FAILED is not
// kept in the pool: refresh terminates it.
func TestRegisterFailedIdleTerminated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, err := e.Launch(e.ctx, time.Time{})
	require.NoError(t, err)
	in, err := e.Warm(e.ctx, id)
	require.NoError(t, err)
	e.GH.RefuseRunners(e.RunnerNames().Prefix() + id)
	in, err = e.Claim(e.ctx, in, "6312")
	require.NoError(t, err)
	in, err = e.WaitSignal(e.ctx, id, state.SignalRegisterFailed, "6312", in.Version)
	require.NoError(t, err)
	_, err = e.Transition(e.ctx, state.Change{InstanceID: id, From: state.Claimed, To: state.Idle, Version: in.Version,
		RunID: "6312", RegisterFailed: true})
	require.NoError(t, err)

	e.refresh(refresh.Config{})
	it, err := e.Store.Get(e.ctx, id)
	require.NoError(t, err)
	require.Equal(t, state.Terminated, it.State)
	require.Contains(t, it.StateReason, "runner registration failed")
	st, err := e.InstanceState(e.ctx, id)
	require.NoError(t, err)
	require.NotEqual(t, ec2types.InstanceStateNameRunning, st)
}
