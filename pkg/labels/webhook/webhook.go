// Package webhook is the stack's door for its GitHub App's webhooks (docs/labels.md): it checks
// each delivery's signature before reading anything of it, takes workflow_job events of the
// stack's jobs, routes a queued job to its pool by its labels (package jobs), records each
// job's event once, and puts it on the jobs queue for the dispatcher; it answers within a second
// and claims nothing itself. It knows nothing of Lambda: cmd/webhook adapts a Function URL's
// events to Handle, and ServeHTTP serves the same handler over plain HTTP (the local world).
package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/platform/metrics"
)

// Defaults of a Config.
const (
	// DefaultMaxBody caps a delivery's body. GitHub caps webhook payloads at 25 MB, but a
	// workflow_job payload is a few KiB; anything near this cap is not one.
	DefaultMaxBody = 256 << 10
)

// Config is the handler's configuration.
type Config struct {
	// Stack is the stack's name: its runners' names start hangar-<stack>-.
	Stack string
	// JobsQueueURL is the jobs queue the dispatcher reads.
	JobsQueueURL string
	// MaxBody caps a delivery's body (DefaultMaxBody when 0).
	MaxBody int
}

// ApplyDefaults fills the fields left zero.
func (c *Config) ApplyDefaults() {
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
}

// Validate checks the configuration; it changes nothing.
func (c Config) Validate() error {
	var errs []error
	if err := names.ValidateStack(c.Stack); err != nil {
		errs = append(errs, fmt.Errorf("stack: %w", err))
	}
	if !strings.HasPrefix(c.JobsQueueURL, "http") {
		errs = append(errs, fmt.Errorf("jobs queue URL %q: want the jobs queue's URL", c.JobsQueueURL))
	}
	if c.MaxBody < 1 || c.MaxBody > 6<<20 {
		errs = append(errs, fmt.Errorf("max body %d: want 1 to %d bytes (a Function URL's own limit)", c.MaxBody, 6<<20))
	}
	return errors.Join(errs...)
}

// Secret returns the webhook secrets a delivery may be signed with: the current one first, and,
// while a rotation is under way, the one before it (so that the App's setting and the stack's
// secret need not change at the same instant). fresh asks for them to be read again rather than
// answered from a cache (a signature that does not match may mean the secret was rotated).
type Secret func(ctx context.Context, fresh bool) ([][]byte, error)

// Pools reads the stack's pool documents (pooldoc.Cache: they are asked for on every delivery).
type Pools interface {
	LoadStack(ctx context.Context) (*pooldoc.Stack, error)
}

// Deps are the handler's dependencies.
type Deps struct {
	Secret Secret
	Queue  awsapi.SQS
	Pools  Pools
	// DynamoDB is the state table's client: the handler records each job's events there, once.
	DynamoDB awsapi.DynamoDB
	Log      *slog.Logger
	Metrics  *metrics.Writer
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Handler handles deliveries for one stack. Build it once (the Lambda does, before its first
// event); it is safe for concurrent use.
type Handler struct {
	cfg    Config
	d      Deps
	prefix string // the stack's runner names' prefix

	mu     sync.Mutex
	built  *pooldoc.Stack // the documents router and store were made from
	router *jobs.Router
	store  *state.Store
	reread time.Time // when the secret was last read again for a mismatch
}

// New returns a handler; it makes no request.
func New(cfg Config, d Deps) (*Handler, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	return &Handler{cfg: cfg, d: d, prefix: state.RunnerNamesOf(cfg.Stack).Prefix()}, nil
}

// Request is one delivery as it arrived.
type Request struct {
	Method  string
	Headers http.Header
	Body    []byte
}

// Response is the answer to it: GitHub shows the status and the body in the App's "Recent
// Deliveries".
type Response struct {
	Status int
	Body   string
}

// stack returns the router and the state store of the stack's current pool documents (which
// Pools caches).
func (h *Handler) stack(ctx context.Context) (*jobs.Router, *state.Store, error) {
	st, err := h.d.Pools.LoadStack(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("read the stack's pool documents: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if st == h.built {
		return h.router, h.store, nil
	}
	router, err := jobs.NewRouter(st.Pools)
	if err != nil {
		return nil, nil, err
	}
	store, err := state.NewStore(h.d.DynamoDB, st.Table, st.Account)
	if err != nil {
		return nil, nil, err
	}
	store.HistoryRetention = st.HistoryRetention()
	h.router, h.store, h.built = router, store, st
	return router, store, nil
}
