package pool

import (
	"context"
	"sync"

	"github.com/hangar-ci/hangar/pkg/poolconfig"
)

// Directory finds pools' queues by name, from their published documents.
type Directory struct {
	Loader *poolconfig.Loader
	SQS    SQS

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
