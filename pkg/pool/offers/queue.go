package offers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
)

// Queue is one pool's queue and its dead-letter queue.
type Queue struct {
	sqs    awsapi.SQS
	pool   string
	url    string
	dlqURL string
}

// NewQueue returns the queue of pool at url, with its dead-letter queue at dlqURL ("" when the
// pool has none: poison is then deleted and logged).
func NewQueue(client awsapi.SQS, pool, url, dlqURL string) (*Queue, error) {
	if err := names.ValidatePool(pool); err != nil {
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

// Depth returns about how many offers the queue holds (SQS's approximate count of visible
// messages), for metrics.
func (q *Queue) Depth(ctx context.Context) (int, error) {
	visible, _, err := q.counts(ctx)
	return visible, err
}

// Counts are a pool queue's approximate message numbers, as SQS reports them.
type Counts struct {
	// Offers are visible offers; InFlight those a claimer holds (received, not yet deleted or
	// given back); DeadLetters the messages moved to the dead-letter queue (poison ones).
	Offers, InFlight, DeadLetters int
}

// Counts reads the queue's counts and its dead-letter queue's (two requests; one without a
// dead-letter queue).
func (q *Queue) Counts(ctx context.Context) (Counts, error) {
	var c Counts
	var err error
	if c.Offers, c.InFlight, err = q.counts(ctx); err != nil {
		return Counts{}, err
	}
	if q.dlqURL == "" {
		return c, nil
	}
	dlq := &Queue{sqs: q.sqs, pool: q.pool + " (dead letters)", url: q.dlqURL}
	if c.DeadLetters, _, err = dlq.counts(ctx); err != nil {
		return Counts{}, err
	}
	return c, nil
}

// counts returns SQS's approximate numbers of visible and in-flight messages.
func (q *Queue) counts(ctx context.Context) (visible, inFlight int, err error) {
	names := []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}
	out, err := q.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &q.url, AttributeNames: names})
	if err != nil {
		return 0, 0, fmt.Errorf("read the depth of pool %s: %w", q.pool, err)
	}
	n := make([]int, len(names))
	for i, name := range names {
		if n[i], err = strconv.Atoi(out.Attributes[string(name)]); err != nil {
			return 0, 0, fmt.Errorf("read the depth of pool %s: %s is %q", q.pool, name, out.Attributes[string(name)])
		}
	}
	return n[0], n[1], nil
}

// sqsBatch is SQS's limit of entries per batch request.
const sqsBatch = 10

// Publish offers idle or stopped instances to the pool, in batches of 10. Every instance must be
// of this pool. It reports every failure; an instance whose entry failed is not offered, and
// refresh will find it idle without a message and republish or expire it.
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
	ids := make([]string, len(insts))
	for i, in := range insts {
		ids[i] = in.ID
	}
	return q.sendNamed(ctx, bodies, ids)
}

// send sends message bodies to the queue, in batches of 10.
func (q *Queue) send(ctx context.Context, bodies []string) error {
	return q.sendNamed(ctx, bodies, nil)
}

// sendNamed sends bodies, naming the instance of each (names[i], when given) in failures.
func (q *Queue) sendNamed(ctx context.Context, bodies, names []string) error {
	return inBatches(bodies, func(start int, chunk []string) ([]types.BatchResultErrorEntry, error) {
		entries := make([]types.SendMessageBatchRequestEntry, len(chunk))
		for i, b := range chunk {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(start + i)), MessageBody: aws.String(b)}
		}
		out, err := q.sqs.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &q.url, Entries: entries})
		if err != nil {
			return nil, fmt.Errorf("publish %d offers to pool %s: %w", len(chunk), q.pool, err)
		}
		for i, f := range out.Failed {
			if n, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && n < len(names) {
				out.Failed[i].Message = aws.String(fmt.Sprintf("publish %s to pool %s: %s", names[n], q.pool, aws.ToString(f.Message)))
			}
		}
		return out.Failed, nil
	})
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
	return inBatches(handles, func(_ int, chunk []string) ([]types.BatchResultErrorEntry, error) {
		entries := make([]types.DeleteMessageBatchRequestEntry, len(chunk))
		for i, h := range chunk {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h)}
		}
		out, err := q.sqs.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &q.url, Entries: entries})
		if err != nil {
			return nil, fmt.Errorf("delete %d messages from pool %s: %w", len(chunk), q.pool, err)
		}
		return out.Failed, nil
	})
}

// releaseBatch makes messages visible again at once (visibility 0), 10 at a time.
func (q *Queue) releaseBatch(ctx context.Context, handles []string) error {
	return inBatches(handles, func(_ int, chunk []string) ([]types.BatchResultErrorEntry, error) {
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(chunk))
		for i, h := range chunk {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h), VisibilityTimeout: 0}
		}
		out, err := q.sqs.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &q.url, Entries: entries})
		if err != nil {
			return nil, fmt.Errorf("give %d messages back to pool %s: %w", len(chunk), q.pool, err)
		}
		return out.Failed, nil
	})
}

// inBatches calls send for each run of up to 10 items (start is the run's offset in items) and
// joins request errors and per-entry failures. A failed run does not stop the others.
func inBatches[T any](items []T, send func(start int, chunk []T) ([]types.BatchResultErrorEntry, error)) error {
	var errs []error
	for start := 0; start < len(items); start += sqsBatch {
		failed, err := send(start, items[start:min(start+sqsBatch, len(items))])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, f := range failed {
			errs = append(errs, fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message)))
		}
	}
	return errors.Join(errs...)
}
