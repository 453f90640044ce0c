package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/hangar-ci/hangar/pkg/state"
)

// SQS is the part of the SQS client the pool uses.
type SQS interface {
	SendMessage(ctx context.Context, params *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	SendMessageBatch(ctx context.Context, params *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	ReceiveMessage(ctx context.Context, params *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, params *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, params *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

// Queue is one pool's queue and its dead-letter queue.
type Queue struct {
	sqs    SQS
	pool   string
	url    string
	dlqURL string
}

// NewQueue returns the queue of pool at url, with its dead-letter queue at dlqURL ("" when the
// pool has none: poison is then deleted and logged).
func NewQueue(client SQS, pool, url, dlqURL string) (*Queue, error) {
	if err := state.ValidatePool(pool); err != nil {
		return nil, err
	}
	if url == "" {
		return nil, fmt.Errorf("pool %s: queue URL is empty", pool)
	}
	return &Queue{sqs: client, pool: pool, url: url, dlqURL: dlqURL}, nil
}

// Pool returns the pool's name.
func (q *Queue) Pool() string { return q.pool }

// URL returns the queue URL.
func (q *Queue) URL() string { return q.url }

// sqsBatch is SQS's limit of entries per batch request.
const sqsBatch = 10

// Publish offers idle or stopped instances to the pool, in batches of 10. Every instance must be
// of this pool. It returns the first failure; instances of a failed entry are not offered, and
// refresh will find them idle without a message and republish or expire them.
func (q *Queue) Publish(ctx context.Context, insts ...*state.Instance) error {
	bodies := make([]string, 0, len(insts))
	for _, in := range insts {
		if in.Pool != q.pool {
			return fmt.Errorf("publish %s: instance of pool %q on the queue of pool %q", in.ID, in.Pool, q.pool)
		}
		m, err := MessageFor(in)
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		b, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("publish %s: %w", in.ID, err)
		}
		bodies = append(bodies, string(b))
	}
	var errs []error
	for start := 0; start < len(bodies); start += sqsBatch {
		chunk := bodies[start:min(start+sqsBatch, len(bodies))]
		entries := make([]types.SendMessageBatchRequestEntry, len(chunk))
		for i, b := range chunk {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(b)}
		}
		out, err := q.sqs.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &q.url, Entries: entries})
		if err != nil {
			return fmt.Errorf("publish %d instances to pool %s: %w", len(chunk), q.pool, err)
		}
		for _, f := range out.Failed {
			i, _ := strconv.Atoi(aws.ToString(f.Id))
			errs = append(errs, fmt.Errorf("publish %s to pool %s: %s: %s", insts[start+i].ID, q.pool, aws.ToString(f.Code), aws.ToString(f.Message)))
		}
	}
	return errors.Join(errs...)
}

// deadLetter moves a poison message to the dead-letter queue (with the reason as a message
// attribute); the caller deletes it from the pool's queue.
func (q *Queue) deadLetter(ctx context.Context, body, reason string) error {
	if q.dlqURL == "" {
		return nil
	}
	_, err := q.sqs.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: &q.dlqURL, MessageBody: aws.String(body),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"hangar-reason": {DataType: aws.String("String"), StringValue: aws.String(reason)},
			"hangar-pool":   {DataType: aws.String("String"), StringValue: aws.String(q.pool)},
		},
	})
	if err != nil {
		return fmt.Errorf("move poison message to the dead-letter queue of pool %s: %w", q.pool, err)
	}
	return nil
}

// deleteBatch deletes messages by receipt handle, 10 at a time.
func (q *Queue) deleteBatch(ctx context.Context, handles []string) error {
	var errs []error
	for start := 0; start < len(handles); start += sqsBatch {
		chunk := handles[start:min(start+sqsBatch, len(handles))]
		entries := make([]types.DeleteMessageBatchRequestEntry, len(chunk))
		for i, h := range chunk {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h)}
		}
		out, err := q.sqs.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &q.url, Entries: entries})
		if err != nil {
			errs = append(errs, fmt.Errorf("delete %d messages from pool %s: %w", len(chunk), q.pool, err))
			continue
		}
		for _, f := range out.Failed {
			errs = append(errs, fmt.Errorf("delete a message from pool %s: %s: %s", q.pool, aws.ToString(f.Code), aws.ToString(f.Message)))
		}
	}
	return errors.Join(errs...)
}

// releaseBatch makes messages visible again at once (visibility 0), 10 at a time.
func (q *Queue) releaseBatch(ctx context.Context, handles []string) error {
	var errs []error
	for start := 0; start < len(handles); start += sqsBatch {
		chunk := handles[start:min(start+sqsBatch, len(handles))]
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(chunk))
		for i, h := range chunk {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h), VisibilityTimeout: 0}
		}
		out, err := q.sqs.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &q.url, Entries: entries})
		if err != nil {
			errs = append(errs, fmt.Errorf("give %d messages back to pool %s: %w", len(chunk), q.pool, err))
			continue
		}
		for _, f := range out.Failed {
			errs = append(errs, fmt.Errorf("give a message back to pool %s: %s: %s", q.pool, aws.ToString(f.Code), aws.ToString(f.Message)))
		}
	}
	return errors.Join(errs...)
}
