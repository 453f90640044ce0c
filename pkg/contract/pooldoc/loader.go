package pooldoc

import (
	"context"
	"sync"

	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
)

// Loader reads pool documents of one stack from SSM, each at most once.
type Loader struct {
	SSM   awsapi.SSM
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

// LoadStack reads the whole stack (see the package function LoadStack) and keeps its documents
// for Get.
func (l *Loader) LoadStack(ctx context.Context) (*Stack, error) {
	s, err := LoadStack(ctx, l.SSM, l.Stack)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.docs == nil {
		l.docs = map[string]*Document{}
	}
	for _, d := range s.Pools {
		l.docs[d.Name] = d
	}
	return s, nil
}
