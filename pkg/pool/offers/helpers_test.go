package offers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
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

const poolName = "linux-x64"

var account = state.Account{Partition: "aws", Region: "us-east-1", ID: testbed.Account}

// env is one test's pool: a fresh table, queue and dead-letter queue.
type env struct {
	t      *testing.T
	store  *state.Store
	sqs    *sqs.Client
	queue  *offers.Queue
	url    string
	dlqURL string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := testbed.Context(t, time.Minute)
	db := testbed.DynamoDB(t)
	table := testbed.Name(t, "hangar-pool")
	require.NoError(t, testbed.CreateTable(ctx, db, table))
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	store, err := state.NewStore(db, table, account)
	require.NoError(t, err)

	client := testbed.SQS(t)
	e := &env{t: t, store: store, sqs: client}
	e.url, e.dlqURL = createQueues(t, client, testbed.Name(t, "hangar-"+poolName))
	e.queue, err = offers.NewQueue(client, poolName, e.url, e.dlqURL)
	require.NoError(t, err)
	return e
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

var idSeq atomic.Uint64

func newID() string { return fmt.Sprintf("i-%017x", idSeq.Add(1)+uint64(time.Now().UnixNano())<<8) }

// idle creates an idle instance of the given spec and offers it to the pool.
func (e *env) idle(spec state.Spec) *state.Instance {
	e.t.Helper()
	ctx := testbed.Context(e.t, 30*time.Second)
	in := &state.Instance{ID: newID(), Pool: poolName, Threshold: time.Now().Add(10 * time.Minute), Spec: spec}
	require.NoError(e.t, e.store.Create(ctx, []*state.Instance{in}))
	out, err := e.store.Transition(ctx, state.Change{InstanceID: in.ID, Pool: poolName, From: state.Created, To: state.Idle,
		Version: 1, Threshold: time.Now().Add(30 * time.Minute)})
	require.NoError(e.t, err)
	require.NoError(e.t, e.queue.Publish(ctx, out))
	return out
}

var spotC7 = state.Spec{InstanceType: "c7i.large", UsageClass: state.UsageSpot, AZ: "us-east-1a", VCPU: 2, MemoryMiB: 4096}

func (e *env) selector() *offers.Selector {
	return &offers.Selector{Queue: e.queue, Store: e.store}
}

func request(run string, n int) offers.Request {
	return offers.Request{Count: n, Assign: state.Assignment{RunID: run, Repo: "octo/app"}, ClaimDeadline: time.Now().Add(5 * time.Minute)}
}

// drain receives every visible message of a queue (hiding them for a minute) and returns them.
func drain(t *testing.T, client *sqs.Client, url string) []sqstypes.Message {
	t.Helper()
	ctx := testbed.Context(t, 30*time.Second)
	var all []sqstypes.Message
	for {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
			VisibilityTimeout: 60, WaitTimeSeconds: 0, MessageAttributeNames: []string{"All"}})
		require.NoError(t, err)
		if len(out.Messages) == 0 {
			return all
		}
		all = append(all, out.Messages...)
	}
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

// offered returns the instance ids the visible messages of the pool offer, with their counts.
func (e *env) offered() map[string]int {
	e.t.Helper()
	out := map[string]int{}
	for _, m := range drain(e.t, e.sqs, e.url) {
		pm, err := offers.ParseMessage(aws.ToString(m.Body), poolName)
		require.NoError(e.t, err)
		out[pm.InstanceID]++
	}
	return out
}
