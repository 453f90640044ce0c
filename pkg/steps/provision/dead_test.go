package provision_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestDeadAgentReplaced: of three pooled instances claimed for a run, one agent is cut off (it
// can neither see the claim nor answer). Its instance is terminated and replaced within the
// acknowledgement bound while the other two keep their claims; the provision succeeds.
func TestDeadAgentReplaced(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	warm := e.mustProvision("7601", 3)
	e.release("7601")
	dead := warm.Instances[1].ID
	require.NoError(t, e.Sim.SetDynamoDB(dead, false))

	res := e.mustProvision("7602", 3)
	require.Equal(t, 1, res.Replaced)
	require.Equal(t, 2, res.Reused, "the two live instances keep their claims")
	require.Equal(t, 1, res.Created)
	require.NotContains(t, ids(res), dead)
	// Replaced at the acknowledgement bound (30 s), not at the registration timeout (a minute
	// here), which would have failed the provision instead.
	it := e.items([]string{dead})[dead]
	require.Equal(t, state.Terminated, it.State)
	require.Contains(t, it.StateReason, "no sign of life within 30s of the claim")
	e.release("7602")
}

// TestStaleHeartbeatNotClaimed: an idle instance whose agent last heartbeat minutes ago is not
// claimed (the claim's condition refuses it); the run gets a fresh instance instead.
func TestStaleHeartbeatNotClaimed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	warm := e.mustProvision("7611", 1)
	e.release("7611")
	quiet := warm.Instances[0].ID
	require.NoError(t, e.Sim.SetDynamoDB(quiet, false))
	db := e.DynamoDB()
	agent, err := state.NewAgent(db, e.Table, e.Store.Account().ARN(quiet), "test")
	require.NoError(t, err)
	_, err = agent.Heartbeat(e.ctx, time.Now().Add(-5*time.Minute))
	require.NoError(t, err)

	res := e.mustProvision("7612", 1)
	require.Equal(t, 1, res.Created)
	require.NotEqual(t, quiet, res.Instances[0].ID)
	it := e.items([]string{quiet})[quiet]
	require.Equal(t, state.Idle, it.State, "left for refresh, which terminates it for its stale heartbeat")
	e.release("7612")
}
