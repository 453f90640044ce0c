package fake

import (
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// SQS holds queues in memory, by URL, with what offers.Queue and offers.Selector use of SQS:
// batched sends, receives that hide messages for their visibility timeout behind a fresh
// receipt handle, batched deletes and visibility changes, and the approximate counts. A queue
// exists once anything is sent to it or read from it.
type SQS struct {
	recorder
	// MaxWait caps a receive's long poll (default 50ms), so that a selection of an empty pool
	// ends quickly; messages arriving during the wait are still returned.
	MaxWait time.Duration

	mu     sync.Mutex
	queues map[string][]*message
	tags   map[string]map[string]string // by queue URL
	seq    int
}

type message struct {
	id, body, handle string
	visibleAt        time.Time
	receives         int
}

// Reset empties every queue and forgets recorded calls and injected errors.
func (q *SQS) Reset() {
	q.mu.Lock()
	q.queues, q.tags = nil, nil
	q.mu.Unlock()
	q.resetCalls()
}

func (q *SQS) queue(url string) []*message {
	if q.queues == nil {
		q.queues = map[string][]*message{}
	}
	return q.queues[url]
}

func (q *SQS) add(url, body string) string {
	q.seq++
	id := "m-" + strconv.Itoa(q.seq)
	q.queues[url] = append(q.queue(url), &message{id: id, body: body})
	return id
}

// CreateQueue implements awsapi.SQS: the queue exists from now on, with the tags it was first
// made with (making it again changes none; attributes are not kept).
func (q *SQS) CreateQueue(_ context.Context, in *sqs.CreateQueueInput, _ ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error) {
	if err := q.call("CreateQueue"); err != nil {
		return nil, err
	}
	url := QueueURLBase + aws.ToString(in.QueueName)
	q.mu.Lock()
	defer q.mu.Unlock()
	msgs, ok := q.queues[url]
	q.queue(url)
	q.queues[url] = msgs
	if !ok && len(in.Tags) > 0 {
		q.tagsOf(url)
		maps.Copy(q.tags[url], in.Tags)
	}
	return &sqs.CreateQueueOutput{QueueUrl: aws.String(url)}, nil
}

func (q *SQS) tagsOf(url string) map[string]string {
	if q.tags == nil {
		q.tags = map[string]map[string]string{}
	}
	if q.tags[url] == nil {
		q.tags[url] = map[string]string{}
	}
	return q.tags[url]
}

// TagQueue implements what an attacker holding a role that may tag queues would do: the queue's
// tags change.
func (q *SQS) TagQueue(_ context.Context, in *sqs.TagQueueInput, _ ...func(*sqs.Options)) (*sqs.TagQueueOutput, error) {
	if err := q.call("TagQueue"); err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	maps.Copy(q.tagsOf(aws.ToString(in.QueueUrl)), in.Tags)
	return &sqs.TagQueueOutput{}, nil
}

// ListQueueTags implements awsapi.SQS; a queue that does not exist is QueueDoesNotExist.
func (q *SQS) ListQueueTags(_ context.Context, in *sqs.ListQueueTagsInput, _ ...func(*sqs.Options)) (*sqs.ListQueueTagsOutput, error) {
	if err := q.call("ListQueueTags"); err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	url := aws.ToString(in.QueueUrl)
	if _, ok := q.queues[url]; !ok {
		return nil, &types.QueueDoesNotExist{Message: aws.String("The specified queue does not exist.")}
	}
	return &sqs.ListQueueTagsOutput{Tags: maps.Clone(q.tags[url])}, nil
}

// DeleteQueue implements awsapi.SQS: the queue and its messages are gone.
func (q *SQS) DeleteQueue(_ context.Context, in *sqs.DeleteQueueInput, _ ...func(*sqs.Options)) (*sqs.DeleteQueueOutput, error) {
	if err := q.call("DeleteQueue"); err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.queues, aws.ToString(in.QueueUrl))
	delete(q.tags, aws.ToString(in.QueueUrl))
	return &sqs.DeleteQueueOutput{}, nil
}

// ListQueues implements awsapi.SQS: the URLs of the queues whose name starts with the prefix,
// in one page.
func (q *SQS) ListQueues(_ context.Context, in *sqs.ListQueuesInput, _ ...func(*sqs.Options)) (*sqs.ListQueuesOutput, error) {
	if err := q.call("ListQueues"); err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	out := &sqs.ListQueuesOutput{}
	for url := range q.queues {
		if strings.HasPrefix(url, QueueURLBase+aws.ToString(in.QueueNamePrefix)) {
			out.QueueUrls = append(out.QueueUrls, url)
		}
	}
	slices.Sort(out.QueueUrls)
	return out, nil
}

// Bodies returns the bodies of the messages the queue at url holds (visible or not).
func (q *SQS) Bodies(url string) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for _, m := range q.queue(url) {
		out = append(out, m.body)
	}
	return out
}

// SendMessage implements awsapi.SQS.
func (q *SQS) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if err := q.call("SendMessage"); err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue(aws.ToString(in.QueueUrl))
	return &sqs.SendMessageOutput{MessageId: aws.String(q.add(aws.ToString(in.QueueUrl), aws.ToString(in.MessageBody)))}, nil
}

// SendMessageBatch implements awsapi.SQS.
func (q *SQS) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	if err := q.call("SendMessageBatch"); err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue(aws.ToString(in.QueueUrl))
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		id := q.add(aws.ToString(in.QueueUrl), aws.ToString(e.MessageBody))
		out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id, MessageId: aws.String(id)})
	}
	return out, nil
}

// ReceiveMessage implements awsapi.SQS: up to MaxNumberOfMessages visible messages, each hidden
// for VisibilityTimeout, waiting up to min(WaitTimeSeconds, MaxWait) for one.
func (q *SQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if err := q.call("ReceiveMessage"); err != nil {
		return nil, err
	}
	maxWait := q.MaxWait
	if maxWait == 0 {
		maxWait = 50 * time.Millisecond
	}
	until := time.Now().Add(min(time.Duration(in.WaitTimeSeconds)*time.Second, maxWait))
	for {
		if out := q.receive(in); len(out.Messages) > 0 || !time.Now().Before(until) {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (q *SQS) receive(in *sqs.ReceiveMessageInput) *sqs.ReceiveMessageOutput {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := int(max(in.MaxNumberOfMessages, 1))
	now := time.Now()
	out := &sqs.ReceiveMessageOutput{}
	for _, m := range q.queue(aws.ToString(in.QueueUrl)) {
		if len(out.Messages) == n {
			break
		}
		if m.visibleAt.After(now) {
			continue
		}
		m.receives++
		m.handle = m.id + "/" + rand.Text()
		m.visibleAt = now.Add(time.Duration(in.VisibilityTimeout) * time.Second)
		out.Messages = append(out.Messages, types.Message{MessageId: aws.String(m.id), Body: aws.String(m.body),
			ReceiptHandle: aws.String(m.handle),
			Attributes:    map[string]string{string(types.MessageSystemAttributeNameApproximateReceiveCount): strconv.Itoa(m.receives)}})
	}
	return out
}

// DeleteMessageBatch implements awsapi.SQS; a handle no longer current fails its entry.
func (q *SQS) DeleteMessageBatch(_ context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	if err := q.call("DeleteMessageBatch"); err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	url := aws.ToString(in.QueueUrl)
	out := &sqs.DeleteMessageBatchOutput{}
	for _, e := range in.Entries {
		msgs := q.queue(url)
		i := q.byHandle(msgs, aws.ToString(e.ReceiptHandle))
		if i < 0 {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("ReceiptHandleIsInvalid"), Message: aws.String("no such receipt handle")})
			continue
		}
		q.queues[url] = append(msgs[:i:i], msgs[i+1:]...)
		out.Successful = append(out.Successful, types.DeleteMessageBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

// ChangeMessageVisibilityBatch implements awsapi.SQS.
func (q *SQS) ChangeMessageVisibilityBatch(_ context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	if err := q.call("ChangeMessageVisibilityBatch"); err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	msgs := q.queue(aws.ToString(in.QueueUrl))
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, e := range in.Entries {
		i := q.byHandle(msgs, aws.ToString(e.ReceiptHandle))
		if i < 0 {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("ReceiptHandleIsInvalid"), Message: aws.String("no such receipt handle")})
			continue
		}
		msgs[i].visibleAt = time.Now().Add(time.Duration(e.VisibilityTimeout) * time.Second)
		out.Successful = append(out.Successful, types.ChangeMessageVisibilityBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

func (q *SQS) byHandle(msgs []*message, handle string) int {
	for i, m := range msgs {
		if m.handle != "" && m.handle == handle {
			return i
		}
	}
	return -1
}

// GetQueueAttributes implements awsapi.SQS: the approximate counts of visible and hidden messages.
func (q *SQS) GetQueueAttributes(_ context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	if err := q.call("GetQueueAttributes"); err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	visible, hidden := 0, 0
	now := time.Now()
	for _, m := range q.queue(aws.ToString(in.QueueUrl)) {
		if m.visibleAt.After(now) {
			hidden++
		} else {
			visible++
		}
	}
	return &sqs.GetQueueAttributesOutput{Attributes: map[string]string{
		string(types.QueueAttributeNameApproximateNumberOfMessages):           strconv.Itoa(visible),
		string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible): strconv.Itoa(hidden),
	}}, nil
}

// Offers returns the offers the queue at url holds (visible or not), parsed for pool, oldest
// first. A body that is not an offer of pool fails the call.
func (q *SQS) Offers(url, pool string) ([]offers.Message, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []offers.Message
	for _, m := range q.queue(url) {
		msg, err := offers.ParseMessage(m.body, pool)
		if err != nil {
			return nil, fmt.Errorf("message %s on %s: %w", m.id, url, err)
		}
		out = append(out, msg)
	}
	return out, nil
}

// Offered returns the ids of the instances the queue at url offers (one per message).
func (q *SQS) Offered(url, pool string) ([]string, error) {
	msgs, err := q.Offers(url, pool)
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.InstanceID
	}
	return ids, err
}
