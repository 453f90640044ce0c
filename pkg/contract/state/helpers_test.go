package state_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
)

var account = state.Account{Partition: "aws", Region: "us-east-1", ID: testbed.Account}

// countingDB counts requests by operation, to show that refused input makes none.
type countingDB struct {
	awsapi.DynamoDB
	calls atomic.Int64
	items atomic.Int64 // items returned by Query (ScannedCount)
	// loseAnswer makes the next TransactWriteItems apply, then fail as if its answer was lost.
	loseAnswer atomic.Bool
}

func (c *countingDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.calls.Add(1)
	return c.DynamoDB.GetItem(ctx, in, o...)
}
func (c *countingDB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	c.calls.Add(1)
	return c.DynamoDB.BatchGetItem(ctx, in, o...)
}
func (c *countingDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.calls.Add(1)
	return c.DynamoDB.UpdateItem(ctx, in, o...)
}
func (c *countingDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.calls.Add(1)
	out, err := c.DynamoDB.TransactWriteItems(ctx, in, o...)
	if err == nil && c.loseAnswer.CompareAndSwap(true, false) {
		return nil, errors.New("read tcp: connection reset by peer (the transaction was applied)")
	}
	return out, err
}
func (c *countingDB) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.calls.Add(1)
	out, err := c.DynamoDB.Query(ctx, in, o...)
	if err == nil {
		c.items.Add(int64(out.ScannedCount))
	}
	return out, err
}

// newStore creates a fresh table in DynamoDB Local and a store on it, counting requests.
func newStore(t *testing.T) (*state.Store, *countingDB) {
	t.Helper()
	db := testbed.DynamoDB(t)
	name := testbed.Name(t, "hangar-test")
	ctx := testbed.Context(t, time.Minute)
	require.NoError(t, testbed.CreateTable(ctx, db, name))
	t.Cleanup(func() {
		_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
	})
	cdb := &countingDB{DynamoDB: db}
	s, err := state.NewStore(cdb, name, account)
	require.NoError(t, err)
	return s, cdb
}

var idSeq atomic.Uint64

// newID returns a fresh, well-formed instance id.
func newID() string { return fmt.Sprintf("i-%017x", idSeq.Add(1)+uint64(time.Now().UnixNano())<<8) }

const testPool = "linux-x64"

func later(d time.Duration) time.Time { return time.Now().Add(d).Truncate(time.Millisecond).UTC() }

// create writes one new instance in created, with run (or none).
func create(t *testing.T, s *state.Store, run string) *state.Instance {
	t.Helper()
	in := &state.Instance{ID: newID(), Pool: testPool, Threshold: later(10 * time.Minute),
		Spec: state.Spec{InstanceType: "c7i.large", UsageClass: state.UsageSpot, AZ: "us-east-1a", VCPU: 2, MemoryMiB: 4096}}
	if run != "" {
		in.RunID, in.Repo = run, "octo/app"
	}
	require.NoError(t, s.Create(testbed.Context(t, 30*time.Second), []*state.Instance{in}))
	return in
}

func assign(run string) *state.Assignment {
	return &state.Assignment{RunID: run, RunAttempt: 1, Repo: "octo/app", RunnerURL: "https://github.com/octo/app",
		Labels: []string{"linux"}}
}

// move applies one transition and fails the test if it does not succeed.
func move(t *testing.T, s *state.Store, in *state.Instance, to state.State, run string) *state.Instance {
	t.Helper()
	c := state.Change{InstanceID: in.ID, Pool: in.Pool, From: in.State, To: to, Version: in.Version, Threshold: later(5 * time.Minute)}
	switch {
	case to == state.Claimed:
		c.Assign = assign(run)
	case to != state.Terminated && in.RunID != "":
		c.RunID = in.RunID
	}
	out, err := s.Transition(testbed.Context(t, 30*time.Second), c)
	require.NoError(t, err, "%s → %s", in.State, to)
	return out
}

// reach returns an instance in state st (with a run where st has one).
func reach(t *testing.T, s *state.Store, st state.State, run string) *state.Instance {
	t.Helper()
	switch st {
	case state.Created:
		return create(t, s, "")
	case state.Idle:
		return move(t, s, create(t, s, ""), state.Idle, "")
	case state.Stopped:
		return move(t, s, reach(t, s, state.Idle, ""), state.Stopped, "")
	case state.Claimed:
		return move(t, s, reach(t, s, state.Idle, ""), state.Claimed, run)
	case state.Running:
		return move(t, s, reach(t, s, state.Claimed, run), state.Running, run)
	case state.Terminated:
		return move(t, s, create(t, s, ""), state.Terminated, "")
	}
	t.Fatalf("no path to %s", st)
	return nil
}
