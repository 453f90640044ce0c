package doorbell

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// lookupTimeout bounds one read of a doorbell's tag, which may outlive the hand-over that
// started it (Expect).
const lookupTimeout = 10 * time.Second

// ownerTTL is how long a tag once read is trusted: well inside the minute SQS makes anyone wait
// before making a queue again under a deleted one's name, so that a doorbell deleted (its
// instance's item written terminated, then swept) and made again in another instance's name is
// always read anew before a secret goes to it.
const ownerTTL = 30 * time.Second

// lookup is one read of the ARN a doorbell is tagged with; done closes when arn and err are set.
type lookup struct {
	done chan struct{}
	at   time.Time // when the read started
	arn  string
	err  error
}

// Expect starts reading the tags of the doorbells of instances ids in the background, so that a
// hand-over to one of them soon after (a claim being written) finds its owner known.
func (b *Bells) Expect(ids ...string) {
	if !b.On() {
		return
	}
	for _, id := range ids {
		b.lookup(b.URL(id))
	}
}

// ownerOf returns the instance ARN the doorbell at url is tagged with, as read within ownerTTL
// (or now). Only the instance itself (conditioned on its own ARN) and the stack's functions (for
// the instance they launched) may tag a doorbell, and only in making it (docs/security.md). A
// read that failed is forgotten, and tried again.
func (b *Bells) ownerOf(ctx context.Context, url string) (string, error) {
	l := b.lookup(url)
	select {
	case <-l.done:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	if l.err != nil {
		b.owners.CompareAndDelete(url, l)
	}
	return l.arn, l.err
}

// pruneEvery is how many reads go by between two sweeps of the reads past ownerTTL, which keep
// the owners of a long-lived function from growing with every instance it ever considered.
const pruneEvery = 256

// lookup returns the read of url's tag, started now unless one is under way or done within
// ownerTTL.
func (b *Bells) lookup(url string) *lookup {
	now := time.Now()
	if b.Now != nil {
		now = b.Now()
	}
	if v, ok := b.owners.Load(url); ok && now.Sub(v.(*lookup).at) < ownerTTL {
		return v.(*lookup)
	}
	l := &lookup{done: make(chan struct{}), at: now}
	for {
		v, loaded := b.owners.LoadOrStore(url, l)
		if !loaded {
			break
		}
		if old := v.(*lookup); now.Sub(old.at) < ownerTTL {
			return old
		} else if b.owners.CompareAndSwap(url, old, l) {
			break
		}
	}
	if b.lookups.Add(1)%pruneEvery == 0 {
		b.owners.Range(func(k, v any) bool {
			if now.Sub(v.(*lookup).at) >= ownerTTL {
				b.owners.CompareAndDelete(k, v)
			}
			return true
		})
	}
	go func() {
		defer close(l.done)
		ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
		defer cancel()
		out, err := b.SQS.ListQueueTags(ctx, &sqs.ListQueueTagsInput{QueueUrl: aws.String(url)})
		if err != nil {
			l.err = fmt.Errorf("read the tags of doorbell %s: %w", url, err)
			return
		}
		if l.arn = out.Tags[TagKey]; l.arn == "" {
			l.err = fmt.Errorf("doorbell %s has no %s tag", url, TagKey)
		}
	}()
	return l
}
