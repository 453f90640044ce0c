package doorbell_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
)

// scriptedDoorbell answers receives with the batches it holds, one per receive, then waits for
// the context; it records what happened in order.
type scriptedDoorbell struct {
	mu      sync.Mutex
	batches [][]string
	events  []string
}

func (d *scriptedDoorbell) record(e string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.events = append(d.events, e)
}

func (d *scriptedDoorbell) log() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.events...)
}

func (d *scriptedDoorbell) ReceiveMessage(ctx context.Context, _ *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	d.mu.Lock()
	if len(d.batches) == 0 {
		d.mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	batch := d.batches[0]
	d.batches = d.batches[1:]
	d.events = append(d.events, "receive")
	d.mu.Unlock()
	out := &sqs.ReceiveMessageOutput{}
	for i, body := range batch {
		out.Messages = append(out.Messages, sqstypes.Message{Body: aws.String(body), ReceiptHandle: aws.String(string(rune('a' + i)))})
	}
	return out, nil
}

func (d *scriptedDoorbell) DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	d.record("delete")
	return &sqs.DeleteMessageBatchOutput{}, nil
}

// TestSettleHoldsTheNextPollAfterAHandOver: after a batch that brought a hand-over, the listener
// rings, then waits for Settle (given the batch's arrival) before it deletes the batch and polls
// again; a plain ring is not held.
func TestSettleHoldsTheNextPollAfterAHandOver(t *testing.T) {
	t.Parallel()
	h, err := json.Marshal(doorbell.HandOver{Run: "42", Version: 3, Kind: doorbell.KindRegistration, Secret: "s3cret"})
	require.NoError(t, err)
	d := &scriptedDoorbell{batches: [][]string{{doorbell.Body}, {string(h)}, {doorbell.Body}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var settles []time.Time
	start := time.Now()
	l := &doorbell.Listener{SQS: d, URL: "https://sqs.example/123456789012/bell", Mailbox: doorbell.NewMailbox(),
		Settle: func(_ context.Context, since time.Time) {
			d.record("settle")
			settles = append(settles, since)
		}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Listen(ctx, func() { d.record("ring") })
	}()
	want := []string{"receive", "ring", "delete", "receive", "ring", "settle", "delete", "receive", "ring", "delete"}
	require.Eventually(t, func() bool { return len(d.log()) >= len(want) }, 10*time.Second, 5*time.Millisecond)
	cancel()
	<-done
	require.Equal(t, want, d.log(), "only the hand-over's batch is held, and its delete waits for Settle")
	require.Len(t, settles, 1)
	require.False(t, settles[0].Before(start), "Settle is given the moment the batch arrived")
}
