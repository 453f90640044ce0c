package poolconfig

import (
	"context"
	"sync"
)

// Loader reads pool documents of one stack from SSM, each at most once.
type Loader struct {
	SSM   SSM
	Stack string

	mu   sync.Mutex
	docs map[string]*Document
}

// Get returns the document of pool.
func (l *Loader) Get(ctx context.Context, pool string) (*Document, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d, ok := l.docs[pool]; ok {
		return d, nil
	}
	d, err := Load(ctx, l.SSM, l.Stack, pool)
	if err != nil {
		return nil, err
	}
	if l.docs == nil {
		l.docs = map[string]*Document{}
	}
	l.docs[pool] = d
	return d, nil
}

// LoadAll reads every pool document of the stack (see the package function LoadAll) and keeps
// them for Get.
func (l *Loader) LoadAll(ctx context.Context) ([]*Document, error) {
	docs, err := LoadAll(ctx, l.SSM, l.Stack)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.docs == nil {
		l.docs = map[string]*Document{}
	}
	for _, d := range docs {
		l.docs[d.Name] = d
	}
	return docs, err
}
