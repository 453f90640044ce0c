package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// ErrBadInput is matched by the errors of input the operator gave that names nothing in the
// stack (an unknown pool or instance) or is malformed: the command exits 2 for them.
var ErrBadInput = errors.New("bad input")

// ErrUnknown is matched, with ErrBadInput, by the errors of input that names nothing in the
// stack: an unknown pool or instance (the web page answers 404 for them).
var ErrUnknown = errors.New("names nothing in the stack")

// unknown marks err (which matches ErrBadInput) as naming nothing in the stack, its text as is.
type unknown struct{ error }

func (u unknown) Unwrap() error      { return u.error }
func (unknown) Is(target error) bool { return target == ErrUnknown }

// Store is the part of the state store the operator reads.
type Store interface {
	Census(ctx context.Context, pool string) (state.Census, error)
	Get(ctx context.Context, id string) (*state.Instance, error)
	GetMany(ctx context.Context, ids []string) (map[string]*state.Instance, error)
}

// Queues reads pool queues' counts, and tidies them (offers.Directory).
type Queues interface {
	Counts(ctx context.Context, pool string) (offers.Counts, error)
	Tidy(ctx context.Context, pool string, offered []state.Instance, items offers.Items) (offers.TidyStats, error)
	QueueCounts(ctx context.Context, what, url, dlqURL string) (offers.Counts, error)
}

// Deps are an Operator's collaborators.
type Deps struct {
	// Stack is the stack as its pool documents describe it (pooldoc.LoadStack).
	Stack  *pooldoc.Stack
	Store  Store
	Queues Queues
	// History reads run records and items for runs and cost (nil: those views refuse).
	History History
	// Documents, Retirer and Marker drain and undrain pools (nil: those refuse).
	Documents Documents
	Retirer   Retirer
	Marker    Marker
	// Now is the clock warm targets are evaluated at; time.Now when nil.
	Now func() time.Time
}

// Operator reads one stack. It is safe for concurrent use.
type Operator struct {
	d Deps
}

// New returns an operator of d.Stack.
func New(d Deps) (*Operator, error) {
	switch {
	case d.Stack == nil:
		return nil, errors.New("operator: Deps.Stack not set")
	case d.Store == nil || d.Queues == nil:
		return nil, errors.New("operator: Deps.Store and Deps.Queues must be set")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	return &Operator{d: d}, nil
}

// pools returns the documents of the named pools (every pool when names is empty); an unknown
// name is bad input that lists the stack's pools.
func (i *Operator) pools(names []string) ([]*pooldoc.Document, error) {
	if len(names) == 0 {
		return i.d.Stack.Pools, nil
	}
	out := make([]*pooldoc.Document, 0, len(names))
	for _, n := range names {
		doc := i.d.Stack.Pool(n)
		if doc == nil {
			return nil, unknown{fmt.Errorf("%w: pool %q: no such pool in stack %s: want one of %s", ErrBadInput, n, i.d.Stack.Name, poolNames(i.d.Stack))}
		}
		out = append(out, doc)
	}
	return out, nil
}

func poolNames(s *pooldoc.Stack) string {
	out := ""
	for k, d := range s.Pools {
		if k > 0 {
			out += ", "
		}
		out += d.Name
	}
	return out
}
