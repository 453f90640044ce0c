package offers

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hangar-ci/hangar/pkg/poolconfig"
	"github.com/hangar-ci/hangar/pkg/state"
)

// Directory is a stack's pools by name: their documents and their queues, each looked up once.
// It is what release and refresh offer instances through (Publish sends each instance to its
// own pool's queue), and what refresh reads queue depths from.
type Directory struct {
	Loader *poolconfig.Loader
	SQS    SQS

	mu     sync.Mutex
	queues map[string]*Queue
}

// Pool returns a pool's document.
func (d *Directory) Pool(ctx context.Context, name string) (*poolconfig.Document, error) {
	return d.Loader.Get(ctx, name)
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

// Publish offers each instance on its own pool's queue (one batch per pool); see Queue.Publish.
func (d *Directory) Publish(ctx context.Context, insts ...*state.Instance) error {
	byPool := map[string][]*state.Instance{}
	var order []string
	for _, in := range insts {
		if _, ok := byPool[in.Pool]; !ok {
			order = append(order, in.Pool)
		}
		byPool[in.Pool] = append(byPool[in.Pool], in)
	}
	var errs []error
	for _, name := range order {
		q, err := d.Queue(ctx, name)
		if err == nil {
			err = q.Publish(ctx, byPool[name]...)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("offer %d instances to pool %s: %w", len(byPool[name]), name, err))
		}
	}
	return errors.Join(errs...)
}

// Counts returns a pool queue's counts (Queue.Counts).
func (d *Directory) Counts(ctx context.Context, name string) (Counts, error) {
	q, err := d.Queue(ctx, name)
	if err != nil {
		return Counts{}, err
	}
	return q.Counts(ctx)
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
