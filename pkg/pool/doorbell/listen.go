package doorbell

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/hangar-ci/hangar/pkg/platform/wait"
)

// Defaults of a Listener.
const (
	DefaultWait = 20 * time.Second // SQS's longest long poll
	maxBackoff  = 30 * time.Second
)

// Receiver is what listening to a doorbell asks of SQS.
type Receiver interface {
	ReceiveMessage(ctx context.Context, params *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, params *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
}

// Listener long-polls one doorbell for its agent.
type Listener struct {
	SQS Receiver
	URL string
	// Wait is each receive's long poll (whole seconds, at most 20; DefaultWait when 0).
	Wait time.Duration
	Log  *slog.Logger
	// Mailbox keeps the hand-overs the doorbell brings (nil: they are dropped, and the doorbell
	// only rings).
	Mailbox *Mailbox
	// Settle, when set, is called after a batch that brought a hand-over has rung, with the
	// moment it arrived; it returns once the agent has acted on it (or after a bound of its own).
	// The batch's delete and the next long poll wait for it, so that they do not compete with the
	// registration the hand-over starts: rings meanwhile wait in the queue, and the agent reads its
	// item when it is done anyway.
	Settle func(ctx context.Context, since time.Time)

	healthy atomic.Bool
}

// Healthy reports whether the last receive worked: while it does not, the agent must poll its
// item as if it had no doorbell.
func (l *Listener) Healthy() bool { return l.healthy.Load() }

// Listen long-polls the doorbell until ctx ends, calling ring the moment it rings (before the
// ring's message is deleted: deleting is bookkeeping). A hand-over is put in the mailbox before
// ring is called, so the read of the item the ring causes finds it there. A receive that fails marks the listener
// unhealthy, calls ring (the control plane deletes a doorbell when it ends the instance, and the
// agent must read its item then) and is tried again after a jittered, capped backoff.
func (l *Listener) Listen(ctx context.Context, ring func()) {
	w := l.Wait
	if w <= 0 || w > DefaultWait {
		w = DefaultWait
	}
	backoff := wait.Backoff{Initial: time.Second, Max: maxBackoff}
	failures := 0
	for ctx.Err() == nil {
		out, err := l.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(l.URL), MaxNumberOfMessages: 10,
			WaitTimeSeconds: int32(w / time.Second), VisibilityTimeout: 30})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			l.healthy.Store(false)
			failures++
			// Read the item now: a doorbell deleted because its instance is ending may answer
			// not found, access denied or nothing useful, and from now on the agent polls.
			ring()
			if failures&(failures-1) == 0 { // 1, 2, 4, …: log, but not every time
				l.log().Warn("doorbell unreachable; polling the item instead", "url", l.URL, "failures", failures, "error", err)
			}
			if backoff.Sleep(ctx) != nil {
				return
			}
			continue
		}
		if failures > 0 {
			l.log().Info("doorbell reachable again", "after failures", failures)
		}
		failures = 0
		backoff.Reset()
		l.healthy.Store(true)
		if len(out.Messages) == 0 {
			continue
		}
		arrived, handOver := time.Now(), false
		for _, m := range out.Messages {
			if h, ok := parseHandOver(aws.ToString(m.Body)); ok && l.Mailbox != nil {
				l.Mailbox.Put(h)
				handOver = true
				l.log().Info("hand-over received", "run", h.Run, "version", h.Version, "kind", h.Kind)
			}
		}
		ring()
		if handOver && l.Settle != nil {
			l.Settle(ctx, arrived)
		}
		entries := make([]sqstypes.DeleteMessageBatchRequestEntry, len(out.Messages))
		for i, m := range out.Messages {
			entries[i] = sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(string(rune('a' + i))), ReceiptHandle: m.ReceiptHandle}
		}
		if _, err := l.SQS.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(l.URL), Entries: entries}); err != nil && ctx.Err() == nil {
			// The ring comes back after its visibility timeout: one read of the item too many.
			l.log().Warn("delete rings", "url", l.URL, "error", err)
		}
	}
}

func (l *Listener) log() *slog.Logger {
	if l.Log != nil {
		return l.Log
	}
	return slog.Default()
}
