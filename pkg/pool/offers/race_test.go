package offers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// The race of concurrent claimers is the one test here that runs against the emulators: what it
// tests is the real protocol under contention, which the fakes only imitate: SQS's long polls and
// visibility timeouts across fifty receivers at once (with the SDK's retries of a response lost
// on the way), and DynamoDB's conditional writes and transactions deciding between them.

const poolName = "linux-x64"

var account = state.Account{Partition: "aws", Region: "us-east-1", ID: testbed.Account}

// env is one test's pool on the emulators: a fresh table, queue and dead-letter queue.
type env struct {
	t     *testing.T
	store *state.Store
	sqs   *sqs.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	testbed.Require(t)
	ctx := testbed.Context(t, time.Minute)
	db := testbed.DynamoDB(t)
	table := testbed.Name(t, "hangar-pool")
	require.NoError(t, testbed.CreateTable(ctx, db, table))
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	store, err := state.NewStore(db, table, account)
	require.NoError(t, err)
	return &env{t: t, store: store, sqs: testbed.SQS(t)}
}

// createQueues makes a pool queue with a dead-letter queue, as the CDK stack does.
func createQueues(t *testing.T, client *sqs.Client, name string) (url, dlqURL string) {
	t.Helper()
	ctx := testbed.Context(t, 30*time.Second)
	dlq, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq")})
	require.NoError(t, err)
	attrs, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	redrive, _ := json.Marshal(map[string]string{"deadLetterTargetArn": attrs.Attributes["QueueArn"], "maxReceiveCount": "50"})
	q, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name),
		Attributes: map[string]string{"RedrivePolicy": string(redrive)}})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl})
		_, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: dlq.QueueUrl})
	})
	return *q.QueueUrl, *dlq.QueueUrl
}

// offersUntil receives the pool messages of a queue (hiding each for a minute) and counts them
// by instance, until every instance of want has been offered and a receive finds nothing more,
// or the deadline passes. A receive whose response was lost on the way (the SDK then retries)
// leaves its messages hidden for their visibility timeout, as SQS does: they come back then,
// and this waits for them rather than calling them lost.
func offersUntil(t *testing.T, client *sqs.Client, url string, want []string, within time.Duration) map[string]int {
	t.Helper()
	ctx := testbed.Context(t, within+30*time.Second)
	deadline := time.Now().Add(within)
	counts := map[string]int{}
	for {
		missing := slices.ContainsFunc(want, func(id string) bool { return counts[id] == 0 })
		wait := int32(0)
		if missing {
			wait = 1
		}
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
			VisibilityTimeout: 60, WaitTimeSeconds: wait})
		require.NoError(t, err)
		for _, m := range out.Messages {
			pm, err := offers.ParseMessage(aws.ToString(m.Body), poolName)
			require.NoError(t, err)
			counts[pm.InstanceID]++
		}
		if len(out.Messages) == 0 && (!missing || time.Now().After(deadline)) {
			return counts
		}
	}
}

// TestConcurrentClaimsRace: 50 claimers asking for 1–3 instances each race over 20 idle instances,
// 20 rounds. No instance is claimed twice; every instance ends claimed exactly once (by the
// claimer that was told so) or still idle, unchanged and offered exactly once.
func TestConcurrentClaimsRace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const rounds, instances, claimers = 20, 20, 50
	for round := range rounds {
		ctx := testbed.Context(t, 2*time.Minute)
		url, dlq := createQueues(t, e.sqs, testbed.Name(t, fmt.Sprintf("race-%d", round)))
		q, err := offers.NewQueue(e.sqs, poolName, url, dlq)
		require.NoError(t, err)
		idle := map[string]*state.Instance{}
		for range instances {
			in := &state.Instance{ID: newID(), Pool: poolName, Threshold: time.Now().Add(10 * time.Minute), Spec: spotC7}
			require.NoError(t, e.store.Create(ctx, []*state.Instance{in}))
			out, err := e.store.Transition(ctx, state.Change{InstanceID: in.ID, Pool: poolName, From: state.Created, To: state.Idle,
				Version: 1, Threshold: time.Now().Add(30 * time.Minute)})
			require.NoError(t, err)
			idle[out.ID] = out
		}
		all := make([]*state.Instance, 0, instances)
		for _, in := range idle {
			all = append(all, in)
		}
		require.NoError(t, q.Publish(ctx, all...))

		sel := &offers.Selector{Queue: q, Store: e.store}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			claimer = map[string]string{} // instance → run that was told it won
			errs    []error
		)
		for c := range claimers {
			run := fmt.Sprintf("%d%03d", round+1, c)
			wg.Go(func() {
				res, err := sel.Claim(ctx, request(run, 1+c%3))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, in := range res.Instances {
					if prev, dup := claimer[in.ID]; dup {
						errs = append(errs, fmt.Errorf("round %d: %s claimed by runs %s and %s", round, in.ID, prev, run))
					}
					claimer[in.ID] = run
				}
			})
		}
		wg.Wait()
		require.Empty(t, errs)
		require.NotEmpty(t, claimer, "round %d: nothing claimed", round)

		ids := make([]string, 0, instances)
		var unclaimed []string
		for id := range idle {
			ids = append(ids, id)
			if _, ok := claimer[id]; !ok {
				unclaimed = append(unclaimed, id)
			}
		}
		// Every unclaimed instance must come back on offer: at once when every receive's
		// response arrived, after the visibility timeout when one was lost on the way.
		offered := offersUntil(t, e.sqs, url, unclaimed, offers.DefaultVisibility+15*time.Second)
		items, err := e.store.GetMany(ctx, ids)
		require.NoError(t, err)
		for id, before := range idle {
			got := items[id]
			if run, ok := claimer[id]; ok {
				require.Equal(t, state.Claimed, got.State, "round %d: %s", round, id)
				require.Equal(t, run, got.RunID, "round %d: %s held by the run told it won", round, id)
				require.Equal(t, before.Version+1, got.Version)
				require.Zero(t, offered[id], "round %d: claimed %s still offered", round, id)
			} else {
				require.Equal(t, before, got, "round %d: unclaimed %s unchanged", round, id)
				require.Equal(t, 1, offered[id], "round %d: unclaimed %s offered exactly once", round, id)
			}
		}
		require.Len(t, offered, instances-len(claimer), "round %d: no message for an unknown instance", round)
	}
}
