package step

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/hangar-ci/hangar/pkg/fleet"
	"github.com/hangar-ci/hangar/pkg/ghapi"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/poolconfig"
	"github.com/hangar-ci/hangar/pkg/provision"
	"github.com/hangar-ci/hangar/pkg/release"
	"github.com/hangar-ci/hangar/pkg/state"
)

// EC2 is every EC2 call the steps make.
type EC2 interface {
	fleet.EC2
	provision.EC2
}

// GitHub is every GitHub call the steps make.
type GitHub interface {
	provision.GitHub
	RemoveToken(ctx context.Context) (ghapi.Token, error)
}

// Wiring assembles the use cases' dependencies from the clients.
type Wiring struct {
	Clients *Clients
	// EC2 replaces Clients.EC2 when set (tests inject faults through it).
	EC2    EC2
	Stack  string
	GitHub GitHub
	Log    *slog.Logger
	Mask   func(secret string)

	loader *poolconfig.Loader
	pools  *Pools
}

func (w *Wiring) init() {
	if w.loader == nil {
		w.loader = &poolconfig.Loader{SSM: w.Clients.SSM, Stack: w.Stack}
		w.pools = &Pools{pool.Directory{Loader: w.loader, SQS: w.Clients.SQS}}
	}
	if w.EC2 == nil {
		w.EC2 = w.Clients.EC2
	}
	if w.Log == nil {
		w.Log = slog.Default()
	}
}

func (w *Wiring) releaseDeps(store *state.Store) release.Deps {
	return release.Deps{Store: store, GitHub: w.GitHub, EC2: w.EC2, Pools: w.pools, Log: w.Log, Mask: w.Mask}
}

// Provision returns provision's dependencies for poolName.
func (w *Wiring) Provision(ctx context.Context, poolName string) (provision.Deps, error) {
	w.init()
	doc, err := w.loader.Get(ctx, poolName)
	if err != nil {
		return provision.Deps{}, fmt.Errorf("pool: %w", err)
	}
	store, err := state.NewStore(w.Clients.DynamoDB, doc.Table, doc.StateAccount())
	if err != nil {
		return provision.Deps{}, err
	}
	queue, err := w.pools.Directory.Queue(ctx, poolName)
	if err != nil {
		return provision.Deps{}, err
	}
	return provision.Deps{
		Pool: doc, Store: store, Claimer: &pool.Selector{Queue: queue, Store: store, Log: w.Log}, Queue: queue,
		Launcher: &fleet.Launcher{EC2: w.EC2, Log: w.Log}, EC2: w.EC2, GitHub: w.GitHub, Log: w.Log, Mask: w.Mask,
		Release: w.releaseDeps(store),
	}, nil
}

// Release returns release's dependencies. The stack's pool documents are read once, for the
// table (every pool of a stack shares it) and for the pools the run's instances belong to.
func (w *Wiring) Release(ctx context.Context) (release.Deps, []error, error) {
	w.init()
	docs, err := w.loader.LoadAll(ctx)
	if len(docs) == 0 && err != nil {
		return release.Deps{}, nil, fmt.Errorf("stack %q: no readable pool document under %s: %w", w.Stack, poolconfig.ParameterPath(w.Stack), err)
	}
	if len(docs) == 0 {
		return release.Deps{}, nil, fmt.Errorf("stack %q: no pool documents under %s: is the stack name right?", w.Stack, poolconfig.ParameterPath(w.Stack))
	}
	var warnings []error
	if err != nil {
		warnings = append(warnings, err)
	}
	store, err := state.NewStore(w.Clients.DynamoDB, docs[0].Table, docs[0].StateAccount())
	if err != nil {
		return release.Deps{}, nil, err
	}
	return w.releaseDeps(store), warnings, nil
}
