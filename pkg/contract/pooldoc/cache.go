package pooldoc

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
)

// Cache keeps a stack's documents for a while, for the long-lived processes that serve many
// requests (the webhook function, the dispatcher): they see a redeployed stack within TTL, at one
// GetParametersByPath per TTL. When a read fails, the documents read last keep serving until the
// next try, one TTL later.
type Cache struct {
	SSM   awsapi.SSM
	Stack string
	// TTL is how long documents are used before they are read again (DefaultCacheTTL when 0).
	TTL time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	Log *slog.Logger

	mu     sync.Mutex
	stack  *Stack
	loaded time.Time
}

// DefaultCacheTTL is how long a Cache keeps documents by default.
const DefaultCacheTTL = time.Minute

// LoadStack returns the stack's documents, read again when they are older than the TTL.
func (c *Cache) LoadStack(ctx context.Context) (*Stack, error) {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	ttl := c.TTL
	if ttl == 0 {
		ttl = DefaultCacheTTL
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stack != nil && now().Sub(c.loaded) < ttl {
		return c.stack, nil
	}
	s, err := LoadStack(ctx, c.SSM, c.Stack)
	switch {
	case err == nil:
		c.stack, c.loaded = s, now()
	case c.stack != nil:
		log := c.Log
		if log == nil {
			log = slog.Default()
		}
		log.Warn("read the stack's pool documents again; keeping the last ones", "stack", c.Stack, "error", err)
		c.loaded = now()
	default:
		return nil, err
	}
	return c.stack, nil
}

// Invalidate makes the next LoadStack read the documents again.
func (c *Cache) Invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loaded = time.Time{}
}
