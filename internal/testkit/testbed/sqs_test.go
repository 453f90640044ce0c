package testbed_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
)

// TestSQSDeletesAndSendsAtOnce: the test bed's SQS keeps a deleted message deleted and a sent one
// sent while other deletes and sends run at once, as Amazon SQS does. moto alone does not (it
// rebuilds a queue's list on delete without the queue's lock: scripts/moto/server.py), and the
// reliability suite's "each idle instance offered exactly once" would then fail on the emulator,
// not on Hangar.
func TestSQSDeletesAndSendsAtOnce(t *testing.T) {
	t.Parallel()
	const (
		held     = 400 // messages received, then deleted by deleters at once
		deleters = 8
		senders  = 4
		sends    = 20 // messages each sender sends meanwhile
	)
	client := testbed.SQS(t)
	ctx := testbed.Context(t, 2*time.Minute)
	q, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(testbed.Name(t, "hangar-atomic"))})
	require.NoError(t, err)
	url := aws.ToString(q.QueueUrl)
	t.Cleanup(func() { _, _ = client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: &url}) })

	for start := 0; start < held; start += 10 {
		entries := make([]types.SendMessageBatchRequestEntry, 10)
		for i := range entries {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(fmt.Sprint("held-", start+i))}
		}
		_, err := client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &url, Entries: entries})
		require.NoError(t, err)
	}
	var handles []string
	for len(handles) < held {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, VisibilityTimeout: 600})
		require.NoError(t, err)
		for _, m := range out.Messages {
			handles = append(handles, aws.ToString(m.ReceiptHandle))
		}
	}

	errs := make(chan error, deleters+senders)
	var wg sync.WaitGroup
	for d := range deleters {
		wg.Go(func() {
			var mine []string
			for i := d; i < len(handles); i += deleters {
				mine = append(mine, handles[i])
			}
			for start := 0; start < len(mine); start += 10 {
				var entries []types.DeleteMessageBatchRequestEntry
				for i, h := range mine[start:min(start+10, len(mine))] {
					entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h)})
				}
				out, err := client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &url, Entries: entries})
				if err == nil && len(out.Failed) > 0 {
					err = fmt.Errorf("delete: %d entries failed: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for s := range senders {
		wg.Go(func() {
			for i := range sends {
				if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(fmt.Sprint("sent-", s, "-", i))}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	attrs, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	require.NoError(t, err)
	require.Equal(t, "0", attrs.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)],
		"every held message was deleted: none may come back")
	require.Equal(t, strconv.Itoa(senders*sends), attrs.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)],
		"every message sent during the deletes is in the queue")
}
