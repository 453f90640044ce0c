package doorbell

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/platform/awserr"
)

// TagKey is the queue tag naming the instance a doorbell belongs to (its ARN). The instance
// role's receive permission is conditioned on aws:ResourceTag/hangar:instance-arn.
const TagKey = "hangar:instance-arn"

// Body is a plain ring's whole message.
const Body = "read your item"

// Queue attributes of a doorbell: a message is kept five minutes at most, long enough for a
// hand-over sent to an instance that is still booting (a plain ring that old is merely one read
// of the item too many); a receive waits up to 20 s by default.
const (
	retentionSeconds = "300"
	waitSeconds      = "20"
	// concurrency bounds the requests one call has in flight.
	concurrency = 16
	// separator joins the stack and the instance: stack and pool names hold no '_', so no pool
	// queue (<stack>-<pool>) and no other stack's doorbell can start with a stack's prefix.
	separator = "_bell_"
	// stackChars is how much of the stack's name a doorbell's name keeps: SQS names are at most
	// 80 characters, and an instance id takes 19 of them after the separator.
	stackChars = 80 - len(separator) - 19
)

// Prefix is the name every doorbell queue of stack starts with; the stack's IAM policies grant on
// it. A stack name too long to keep whole is cut and ends with a hash of the whole name, so that
// two stacks never share a prefix.
func Prefix(stack string) string {
	if len(stack) > stackChars {
		sum := sha256.Sum256([]byte(stack))
		stack = stack[:stackChars-9] + "-" + hex.EncodeToString(sum[:4])
	}
	return stack + separator
}

// Name is the doorbell queue name of instance id in stack.
func Name(stack, id string) string { return Prefix(stack) + id }

// Bells creates, rings and deletes the doorbells of one stack, and hands secrets over through
// them. The zero value (no SQS client) does nothing: agents without a doorbell read their items
// on their heartbeats.
type Bells struct {
	SQS   awsapi.SQS
	Stack string
	// Base is the queue URL up to the queue's name (scheme, host, account), taken from any queue
	// of the stack's account and region (the pool queue): doorbell URLs are Base + Name.
	Base string
	// Manages says this side makes and deletes doorbells: the stack's functions and the operator
	// do. The workflows' steps may not (their role cannot): they leave making an instance's
	// doorbell to its agent (Own) and deleting it to the functions, and Create and Delete do
	// nothing.
	Manages bool
	// Now dates the reads of doorbells' tags (time.Now when nil).
	Now func() time.Time

	owners  sync.Map // doorbell URL → *lookup of the instance ARN it is tagged with
	lookups atomic.Int64
}

// New returns the bells of stack, whose queues live beside the queue at queueURL, made and
// deleted by this side (Manages).
func New(client awsapi.SQS, stack, queueURL string) (*Bells, error) {
	i := strings.LastIndexByte(queueURL, '/')
	if client == nil || stack == "" || i < 0 {
		return nil, fmt.Errorf("doorbells of stack %q beside queue %q: want an SQS client, a stack name and a queue URL", stack, queueURL)
	}
	return &Bells{SQS: client, Stack: stack, Base: queueURL[:i+1], Manages: true}, nil
}

// On reports whether b makes doorbells at all.
func (b *Bells) On() bool { return b != nil && b.SQS != nil }

// URL is the doorbell URL of instance id ("" when b is off).
func (b *Bells) URL(id string) string {
	if !b.On() {
		return ""
	}
	return b.Base + Name(b.Stack, id)
}

// Create makes the doorbells of instances (id → ARN), tagged with their ARN, in parallel, when
// this side manages doorbells. Creating one that exists with the same attributes is a no-op, so
// Create may be retried.
func (b *Bells) Create(ctx context.Context, instances map[string]string) error {
	if !b.On() || !b.Manages || len(instances) == 0 {
		return nil
	}
	return b.each(ctx, keys(instances), func(ctx context.Context, id string) error {
		if _, err := b.SQS.CreateQueue(ctx, createInput(Name(b.Stack, id), instances[id])); err != nil {
			return fmt.Errorf("create the doorbell of %s: %w", id, err)
		}
		return nil
	})
}

// Creator is what making a doorbell asks of SQS.
type Creator interface {
	CreateQueue(ctx context.Context, params *sqs.CreateQueueInput, optFns ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error)
}

// Own makes the doorbell of instance id (ARN arn) of stack, beside the pool's queue at queueURL,
// as its agent does at boot, and returns its URL: the instance role may make only a doorbell
// tagged with its own ARN, so an instance launched by a workflow's step (which may make none)
// has one before it takes work. One that exists already is left as it is.
func Own(ctx context.Context, c Creator, stack, queueURL, id, arn string) (string, error) {
	i := strings.LastIndexByte(queueURL, '/')
	if i < 0 || stack == "" || names.ValidateInstanceID(id) != nil {
		return "", fmt.Errorf("doorbell of instance %q of stack %q beside queue %q: want an instance id, a stack name and a queue URL", id, stack, queueURL)
	}
	url := queueURL[:i+1] + Name(stack, id)
	if _, err := c.CreateQueue(ctx, createInput(Name(stack, id), arn)); err != nil {
		return url, fmt.Errorf("make the doorbell of %s: %w", id, err)
	}
	return url, nil
}

// StackOf is the stack whose pool pool has its queue at queueURL (named <stack>-<pool>), or "".
func StackOf(queueURL, pool string) string {
	stack, ok := strings.CutSuffix(queueURL[strings.LastIndexByte(queueURL, '/')+1:], "-"+pool)
	if !ok {
		return ""
	}
	return stack
}

// createInput makes the doorbell name, tagged with the instance's ARN.
func createInput(name, arn string) *sqs.CreateQueueInput {
	return &sqs.CreateQueueInput{
		QueueName: aws.String(name),
		Attributes: map[string]string{
			string(sqstypes.QueueAttributeNameMessageRetentionPeriod):        retentionSeconds,
			string(sqstypes.QueueAttributeNameReceiveMessageWaitTimeSeconds): waitSeconds,
			string(sqstypes.QueueAttributeNameSqsManagedSseEnabled):          "true",
		},
		Tags: map[string]string{TagKey: arn},
	}
}

// Ring rings the doorbells at urls (empty ones skipped), in parallel. A doorbell that does not
// exist is not an error: its agent reads its item on its heartbeat anyway.
func (b *Bells) Ring(ctx context.Context, urls ...string) error {
	if !b.On() {
		return nil
	}
	return b.each(ctx, urls, func(ctx context.Context, url string) error {
		if url == "" {
			return nil
		}
		_, err := b.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(Body)})
		if err != nil && !awserr.IsNotFound(err) {
			return fmt.Errorf("ring %s: %w", url, err)
		}
		return nil
	})
}

// Delete deletes the doorbells of instances ids, in parallel, when this side manages doorbells;
// those gone already are no error. An agent long-polling a deleted doorbell is told at once, and
// reads its item.
func (b *Bells) Delete(ctx context.Context, ids ...string) error {
	if !b.On() || !b.Manages {
		return nil
	}
	return b.each(ctx, ids, func(ctx context.Context, id string) error {
		b.owners.Delete(b.URL(id))
		_, err := b.SQS.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(b.URL(id))})
		if err != nil && !awserr.IsNotFound(err) {
			return fmt.Errorf("delete the doorbell of %s: %w", id, err)
		}
		return nil
	})
}

// Sweep deletes the doorbells of the stack whose instance is not live (live reports, for a batch
// of instance ids, which are), and returns how many it deleted. Items are written before their
// doorbells are created, so a doorbell without a live item belongs to no instance Hangar runs.
func (b *Bells) Sweep(ctx context.Context, live func(ctx context.Context, ids []string) (map[string]bool, error)) (int, error) {
	if !b.On() {
		return 0, nil
	}
	prefix := Prefix(b.Stack)
	var ids []string
	p := sqs.NewListQueuesPaginator(b.SQS, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(prefix), MaxResults: aws.Int32(1000)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return 0, fmt.Errorf("list the doorbells of stack %s: %w", b.Stack, err)
		}
		for _, u := range page.QueueUrls {
			name := u[strings.LastIndexByte(u, '/')+1:]
			id, ok := strings.CutPrefix(name, prefix)
			if !ok || names.ValidateInstanceID(id) != nil {
				continue // not a doorbell Hangar made: not the sweep's to judge
			}
			ids = append(ids, id)
		}
	}
	deleted := 0
	for start := 0; start < len(ids); start += 100 {
		batch := ids[start:min(start+100, len(ids))]
		alive, err := live(ctx, batch)
		if err != nil {
			return deleted, fmt.Errorf("read the items of doorbells: %w", err)
		}
		var dead []string
		for _, id := range batch {
			if !alive[id] {
				dead = append(dead, id)
			}
		}
		if err := b.Delete(ctx, dead...); err != nil {
			return deleted, err
		}
		deleted += len(dead)
	}
	return deleted, nil
}

// each runs f for every item, at most concurrency at once, and joins the errors.
func (b *Bells) each(ctx context.Context, items []string, f func(context.Context, string) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, concurrency)
	)
	for _, it := range items {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := f(ctx, it); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
