package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
	"github.com/hangar-ci/hangar/pkg/pool/pricing"
)

// Store is the part of the state store the pool and the doors use (*state.Store). Retirements go
// through TransitionAll with the items as given, so that an instance ended while it held a run
// leaves that run's record (state.RunRecord).
type Store interface {
	Create(ctx context.Context, insts []*state.Instance) error
	ByRun(ctx context.Context, run string) ([]state.Instance, error)
	Get(ctx context.Context, id string) (*state.Instance, error)
	GetMany(ctx context.Context, ids []string) (map[string]*state.Instance, error)
	Transition(ctx context.Context, c state.Change) (*state.Instance, error)
	TransitionAll(ctx context.Context, changes []state.Change, befores []state.Instance) []state.Written
	Poll(ctx context.Context, ids []string, interval time.Duration, check func(map[string]*state.Instance) (done bool, next time.Duration)) error
	// Census, Lease and ReleaseLease hold a pool's maxInstances (and the stack's): a creation
	// counts live instances under a lease, so that two creations never both fill one gap.
	Census(ctx context.Context, pool string) (state.Census, error)
	Lease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	ReleaseLease(ctx context.Context, name, holder string) error
	// MarkBroken and Broken keep the spec whose instances fail the image contract: no more of
	// it is launched.
	MarkBroken(ctx context.Context, pool string, b state.BrokenSpec) error
	Broken(ctx context.Context, pool string) (*state.BrokenSpec, error)
}

// Queues are the stack's pools' queues (offers.Directory): the queue to claim from, by pool, and
// offering instances on the queues their items name.
type Queues interface {
	Queue(ctx context.Context, name string) (*offers.Queue, error)
	Publish(ctx context.Context, insts ...*state.Instance) error
}

// Launcher creates instances with EC2 Fleet, tells instance types' sizes, and fills in the types
// of a pool that chooses them by size (fleet.Launcher).
type Launcher interface {
	Launch(ctx context.Context, req fleet.Request) ([]fleet.Instance, error)
	Describe(ctx context.Context, types []string) (map[string]fleet.Spec, error)
	Resolve(ctx context.Context, doc *pooldoc.Document) error
}

// Pricer finds the hourly prices of launched instances (pricing.Pricer); an unknown price is a
// zero pricing.Price.
type Pricer interface {
	Prices(ctx context.Context, insts []pricing.Instance) []pricing.Price
}

// Pool is one stack's pool of instances. Build it once per process from the stack's clients; it
// is safe for concurrent use.
type Pool struct {
	// Stack is the stack's name, in the reserved tags of the instances it launches.
	Stack    string
	Store    Store
	EC2      awsapi.EC2
	Queues   Queues
	Launcher Launcher
	// Bells makes, rings and deletes the instances' doorbells and hands their secrets over.
	// Without doorbells no secret reaches an instance: the doors refuse a pool without them.
	Bells *doorbell.Bells
	// Prices prices the instances launched, recorded in their items (nil: price unknown).
	Prices Pricer
	Log    *slog.Logger
	// Clock passes the waits between retries of EC2 (wait.Real when nil).
	Clock wait.Clock

	mu       sync.Mutex
	resolved map[*pooldoc.Document]bool // documents whose instance types are resolved
}

// Validate refuses a pool missing a collaborator (a wiring mistake) before anything happens;
// doors call it as they are built. Launcher and Queues are needed only to acquire, and Bells
// only to hand over, so each door says what it needs.
func (p *Pool) Validate(needs ...string) error {
	if p == nil {
		return errors.New("pool: not set")
	}
	set := map[string]bool{"Store": p.Store != nil, "EC2": p.EC2 != nil, "Queues": p.Queues != nil,
		"Launcher": p.Launcher != nil, "Bells": p.Bells.On()}
	var missing []string
	for _, n := range append([]string{"Store", "EC2"}, needs...) {
		if !set[n] && !slices.Contains(missing, n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("pool: Pool.%s not set", strings.Join(missing, ", Pool."))
	}
	return nil
}

// Spec is an instance type's size.
type Spec = fleet.Spec

// Describe returns the sizes of instance types.
func (p *Pool) Describe(ctx context.Context, types []string) (map[string]Spec, error) {
	return p.Launcher.Describe(ctx, types)
}

// Resolve fills in the instance types of a pool that chooses them by size (pooldoc.Document.
// ChoosesTypesBySize), once per document: before anything is claimed or launched for it.
func (p *Pool) Resolve(ctx context.Context, doc *pooldoc.Document) error {
	if !doc.ChoosesTypesBySize() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resolved[doc] {
		return nil
	}
	if err := p.Launcher.Resolve(ctx, doc); err != nil {
		return fmt.Errorf("pool %s: %w", doc.Name, err)
	}
	if p.resolved == nil {
		p.resolved = map[*pooldoc.Document]bool{}
	}
	p.resolved[doc] = true
	return nil
}

func (p *Pool) log() *slog.Logger {
	if p.Log != nil {
		return p.Log
	}
	return slog.Default()
}
