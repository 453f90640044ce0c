package fake_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// agentStore is the agent's view of its own item: pkg/instance/agent's Store, which state.Agent
// implements on DynamoDB and fake.AgentStore on the fake.
type agentStore interface {
	Get(ctx context.Context) (*state.Instance, error)
	Heartbeat(ctx context.Context, at time.Time) (*state.Instance, error)
	Signal(ctx context.Context, sig state.Signal) error
	Ack(ctx context.Context, version int64, at time.Time) error
	AckRead(ctx context.Context, run string, version int64, at time.Time) (*state.Instance, error)
	Ask(ctx context.Context, version int64, n int, at time.Time) error
}

// runAgentStoreContract asks the same outcomes of both views of the agent's item: reads, the
// acknowledgement that is a read, asks, signals and heartbeats, each conditional on the version.
func runAgentStoreContract(t *testing.T, b backend, view func(id string) agentStore) {
	ctx := testbed.Context(t, time.Minute)
	const id = "i-0aaaaaaaaaaaaaaa1"
	a := view(id)
	_, err := a.Get(ctx)
	require.ErrorIs(t, err, state.ErrNotFound, "no item yet")
	_, err = a.AckRead(ctx, "500", 1, time.Now())
	require.ErrorIs(t, err, state.ErrNotFound, "no item yet")

	cur, err := create("")(ctx, b, id, nil)
	require.NoError(t, err)
	cur, err = move(state.Idle, nil)(ctx, b, id, cur)
	require.NoError(t, err)
	claimed, err := move(state.Claimed, nil)(ctx, b, id, cur)
	require.NoError(t, err)
	v := claimed.Version

	_, err = a.AckRead(ctx, "500", v+1, time.Now())
	require.ErrorIs(t, err, state.ErrConflict, "another version")
	_, err = a.AckRead(ctx, "501", v, time.Now())
	require.ErrorIs(t, err, state.ErrConflict, "another run")
	at := time.Now()
	before, err := a.AckRead(ctx, "500", v, at)
	require.NoError(t, err)
	require.Equal(t, v, before.Version)
	require.Less(t, before.AckVersion, v, "the item as it was before the acknowledgement")
	after, err := a.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, v, after.AckVersion)
	require.Equal(t, at.UnixMilli(), after.HeartbeatAt.UnixMilli(), "with a heartbeat")

	require.Error(t, a.Ask(ctx, v, 0, time.Now()), "asks count from 1")
	require.ErrorIs(t, a.Ask(ctx, v-1, 1, time.Now()), state.ErrConflict)
	require.NoError(t, a.Ask(ctx, v, 2, time.Now()))
	after, err = a.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, v, after.AskVersion)
	require.Equal(t, 2, after.Asks)

	require.ErrorIs(t, a.Ack(ctx, v-1, time.Now()), state.ErrConflict)
	require.NoError(t, a.Ack(ctx, v, time.Now()))
	require.ErrorIs(t, a.Signal(ctx, state.Signal{Name: state.SignalRegistered, Run: "500", Version: v - 1, At: time.Now()}), state.ErrConflict)
	require.NoError(t, a.Signal(ctx, state.Signal{Name: state.SignalRegistered, Run: "500", Version: v, At: time.Now(), Log: "ok"}))
	beat := time.Now().Add(time.Second)
	after, err = a.Heartbeat(ctx, beat)
	require.NoError(t, err)
	require.True(t, after.SignalFor(state.SignalRegistered, "500", v), "the heartbeat returns the item as it is after it")
	require.Equal(t, beat.UnixMilli(), after.HeartbeatAt.UnixMilli())
}

func TestAgentStoreContractFake(t *testing.T) {
	t.Parallel()
	s := fake.NewStore(fake.Account)
	runAgentStoreContract(t, backend{store: s}, func(id string) agentStore { return &fake.AgentStore{Store: s, ID: id} })
}

func TestAgentStoreContractDynamoDB(t *testing.T) {
	t.Parallel()
	testbed.Require(t)
	db := testbed.DynamoDB(t)
	table := testbed.Name(t, "hangar-agentstore")
	require.NoError(t, testbed.CreateTable(testbed.Context(t, time.Minute), db, table))
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	s, err := state.NewStore(db, table, fake.Account)
	require.NoError(t, err)
	runAgentStoreContract(t, backend{store: s}, func(id string) agentStore {
		a, err := state.NewAgent(db, table, fake.Account.ARN(id), "")
		require.NoError(t, err)
		return a
	})
}
