package offers

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
)

// Directory is a stack's pools by name: their documents and their queues, each looked up once.
// It is what release and refresh offer instances through (Publish sends each instance to its
// own pool's queue), and what refresh reads queue depths from.
type Directory struct {
	Loader *pooldoc.Loader
	SQS    awsapi.SQS

	mu     sync.Mutex
	queues map[string]*Queue
}

// Queue returns a pool's queue.
func (d *Directory) Queue(ctx context.Context, name string) (*Queue, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if q, ok := d.queues[name]; ok {
		return q, nil
	}
	doc, err := d.Loader.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	q, err := NewQueue(d.SQS, name, doc.QueueURL, doc.DeadLetterQueueURL)
	if err != nil {
		return nil, err
	}
	if d.queues == nil {
		d.queues = map[string]*Queue{}
	}
	d.queues[name] = q
	return q, nil
}

// Publish offers each instance on the queue its item names (state.Home; one batch per queue),
// without reading the pool's document; see Queue.Publish.
func (d *Directory) Publish(ctx context.Context, insts ...*state.Instance) error {
	type dest struct{ pool, url string }
	byDest := map[dest][]*state.Instance{}
	var order []dest
	for _, in := range insts {
		k := dest{pool: in.Pool, url: in.Queue}
		if _, ok := byDest[k]; !ok {
			order = append(order, k)
		}
		byDest[k] = append(byDest[k], in)
	}
	var errs []error
	for _, k := range order {
		q, err := d.queueAt(ctx, k.pool, k.url)
		if err == nil {
			err = q.Publish(ctx, byDest[k]...)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("offer %d instances to pool %s: %w", len(byDest[k]), k.pool, err))
		}
	}
	return errors.Join(errs...)
}

// queueAt is pool's queue at url.
func (d *Directory) queueAt(_ context.Context, pool, url string) (*Queue, error) {
	if url == "" {
		return nil, fmt.Errorf("its items name no queue (state.Home): every launch and claim writes one")
	}
	return NewQueue(d.SQS, pool, url, "")
}

// Counts returns a pool queue's counts (Queue.Counts).
func (d *Directory) Counts(ctx context.Context, name string) (Counts, error) {
	q, err := d.Queue(ctx, name)
	if err != nil {
		return Counts{}, err
	}
	return q.Counts(ctx)
}

// QueueCounts reads another queue of the stack's and its dead-letter queue's counts (the jobs
// queue: hangar status), named what in errors.
func (d *Directory) QueueCounts(ctx context.Context, what, url, dlqURL string) (Counts, error) {
	return (&Queue{sqs: d.SQS, pool: what, url: url, dlqURL: dlqURL}).Counts(ctx)
}

// Depth returns about how many offers a pool's queue holds.
func (d *Directory) Depth(ctx context.Context, name string) (int, error) {
	q, err := d.Queue(ctx, name)
	if err != nil {
		return 0, err
	}
	return q.Depth(ctx)
}

// Tidy makes a pool's offers agree with its idle and stopped instances; see Queue.Tidy.
func (d *Directory) Tidy(ctx context.Context, name string, offered []state.Instance, items Items) (TidyStats, error) {
	q, err := d.Queue(ctx, name)
	if err != nil {
		return TidyStats{}, err
	}
	return q.Tidy(ctx, offered, items)
}
