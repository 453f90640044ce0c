package fake

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hangar-ci/hangar/pkg/offers"
	"github.com/hangar-ci/hangar/pkg/poolconfig"
	"github.com/hangar-ci/hangar/pkg/state"
)

// Pools is a stack's pools by name, as offers.Directory is, without a document loader: their
// documents are given, their queues are real offers.Queues on the fake SQS.
type Pools struct {
	recorder
	SQS *SQS

	mu   sync.Mutex
	docs map[string]*poolconfig.Document
}

// Add makes doc one of the pools.
func (p *Pools) Add(doc *poolconfig.Document) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.docs == nil {
		p.docs = map[string]*poolconfig.Document{}
	}
	p.docs[doc.Name] = doc
}

// Reset forgets recorded calls and injected errors (the pools stay).
func (p *Pools) Reset() { p.resetCalls() }

// Pool returns a pool's document.
func (p *Pools) Pool(_ context.Context, name string) (*poolconfig.Document, error) {
	if err := p.call("Pool"); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	doc, ok := p.docs[name]
	if !ok {
		return nil, fmt.Errorf("pool %s: no such pool document", name)
	}
	return doc, nil
}

// Queue returns a pool's queue.
func (p *Pools) Queue(ctx context.Context, name string) (*offers.Queue, error) {
	doc, err := p.Pool(ctx, name)
	if err != nil {
		return nil, err
	}
	return offers.NewQueue(p.SQS, name, doc.QueueURL, doc.DeadLetterQueueURL)
}

// Publish offers each instance on its own pool's queue.
func (p *Pools) Publish(ctx context.Context, insts ...*state.Instance) error {
	if err := p.call("Publish"); err != nil {
		return err
	}
	var errs []error
	for _, in := range insts {
		q, err := p.Queue(ctx, in.Pool)
		if err == nil {
			err = q.Publish(ctx, in)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Depth returns about how many offers a pool's queue holds.
func (p *Pools) Depth(ctx context.Context, name string) (int, error) {
	q, err := p.Queue(ctx, name)
	if err != nil {
		return 0, err
	}
	return q.Depth(ctx)
}

// Tidy makes a pool's offers agree with its idle and stopped instances (offers.Queue.Tidy).
func (p *Pools) Tidy(ctx context.Context, name string, offered []state.Instance, items offers.Items) (offers.TidyStats, error) {
	q, err := p.Queue(ctx, name)
	if err != nil {
		return offers.TidyStats{}, err
	}
	return q.Tidy(ctx, offered, items)
}
