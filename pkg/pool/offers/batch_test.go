package offers_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// countingDB counts the writes a store sends to DynamoDB Local.
type countingDB struct {
	awsapi.DynamoDB
	mu                   sync.Mutex
	transactions, single int
}

func (c *countingDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.mu.Lock()
	c.transactions++
	c.mu.Unlock()
	return c.DynamoDB.TransactWriteItems(ctx, in, o...)
}

func (c *countingDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.mu.Lock()
	c.single++
	c.mu.Unlock()
	return c.DynamoDB.UpdateItem(ctx, in, o...)
}

func (c *countingDB) writes() (transactions, single int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.transactions, c.single
}

// TestClaimsOfOneReceiveInOneTransaction: ten offers received together are claimed by one
// TransactWriteItems, and each claimed item holds the run. When one of the ten was taken by
// another run after it was offered, the transaction is cancelled for that one alone: the nine
// others are claimed one by one, the taken one is left to its holder and its message dropped.
func TestClaimsOfOneReceiveInOneTransaction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		taken        bool
		transactions int
		single       int
	}{
		{name: "all ten free", transactions: 1, single: 0},
		{name: "one of ten taken meanwhile", taken: true, transactions: 1, single: 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := testbed.Context(t, time.Minute)
			var ids []string
			for range 10 {
				ids = append(ids, e.idle(spotC7).ID)
			}
			if tc.taken {
				in, err := e.store.Get(ctx, ids[4])
				require.NoError(t, err)
				_, err = e.store.Transition(ctx, state.Change{InstanceID: in.ID, Pool: poolName, From: state.Idle, To: state.Claimed,
					Version: in.Version, Assign: &state.Assignment{RunID: "99", Repo: "octo/other"}, Threshold: time.Now().Add(time.Hour)})
				require.NoError(t, err)
			}
			db := &countingDB{DynamoDB: testbed.DynamoDB(t)}
			store, err := state.NewStore(db, e.store.Table(), account)
			require.NoError(t, err)

			res, err := (&offers.Selector{Queue: e.queue, Store: store}).Claim(ctx, request("21", 10))
			require.NoError(t, err)
			want := 10
			if tc.taken {
				want = 9
				require.Equal(t, 1, res.Stats.Lost, "the taken instance's offer is stale")
			}
			require.Len(t, res.Instances, want)
			transactions, single := db.writes()
			require.Equal(t, tc.transactions, transactions, "claims of one receive: one transaction")
			require.Equal(t, tc.single, single, "singles only for the items a cancelled transaction did not name")
			for _, id := range ids {
				got, err := e.store.Get(ctx, id)
				require.NoError(t, err)
				require.Equal(t, state.Claimed, got.State, id)
				if tc.taken && id == ids[4] {
					require.Equal(t, "99", got.RunID, "the other run keeps what it took")
					continue
				}
				require.Equal(t, "21", got.RunID, id)
			}
			for _, in := range res.Instances {
				require.Equal(t, state.Claimed, in.State)
				require.Equal(t, "21", in.RunID)
				require.Equal(t, spotC7.InstanceType, in.InstanceType, "a batch claim carries its offer's spec")
			}
			require.Empty(t, e.offered(), "every used or stale message is deleted")
		})
	}
}
