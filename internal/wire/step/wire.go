package step

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
	"github.com/hangar-ci/hangar/pkg/pool/pricing"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
	"github.com/hangar-ci/hangar/pkg/steps/release"
)

// GitHub is every GitHub call the steps make (release's are a part of provision's).
type GitHub interface {
	provision.GitHub
}

// Wiring assembles the use cases' dependencies from the clients, reading the stack's pool
// documents (each at most once) to find the table and the queues.
type Wiring struct {
	Clients *Clients
	// EC2 replaces Clients.EC2 when set (tests inject faults through it).
	EC2    awsapi.EC2
	Stack  string
	GitHub GitHub
	Log    *slog.Logger
	Mask   func(secret string)

	loader *pooldoc.Loader
	dir    *offers.Directory
	prices *pricing.Pricer
}

func (w *Wiring) init() {
	if w.loader == nil {
		w.loader = &pooldoc.Loader{SSM: w.Clients.SSM, Stack: w.Stack}
		w.dir = &offers.Directory{Loader: w.loader, SQS: w.Clients.SQS}
		w.prices = pricing.NewFromConfig(w.Clients.AWS)
		w.prices.Log = w.Log
	}
	if w.EC2 == nil {
		w.EC2 = w.Clients.EC2
	}
	if w.Log == nil {
		w.Log = slog.Default()
	}
}

// pool is the stack's pool on store, ringing and handing over through bells (nil: none).
func (w *Wiring) pool(store *state.Store, bells *doorbell.Bells) *pool.Pool {
	return &pool.Pool{Stack: w.Stack, Store: store, EC2: w.EC2, Queues: w.dir, Launcher: &fleet.Launcher{EC2: w.EC2, Log: w.Log},
		Bells: bells, Prices: w.prices, Log: w.Log}
}

func (w *Wiring) releaser(cfg release.Config, store *state.Store, bells *doorbell.Bells) (*release.Releaser, error) {
	return release.New(cfg, release.Deps{Pool: w.pool(store, bells), GitHub: w.GitHub, Runners: state.RunnerNamesOf(w.Stack), Log: w.Log})
}

// bells returns the stack's doorbells, which live beside its pool queues. The steps neither make
// nor delete one (the workflow role may not): each instance makes its own, and the stack's
// functions delete them.
func (w *Wiring) bells(queueURL string) (*doorbell.Bells, error) {
	b, err := doorbell.New(w.Clients.SQS, w.Stack, queueURL)
	if err != nil {
		return nil, fmt.Errorf("doorbells: %w", err)
	}
	b.Manages = false
	return b, nil
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
	store.HistoryRetention = doc.HistoryRetention()
	bells, err := w.bells(doc.QueueURL)
	if err != nil {
		return provision.Deps{}, err
	}
	return provision.Deps{Doc: doc, Pool: w.pool(store, bells), GitHub: w.GitHub, Log: w.Log, Mask: w.Mask}, nil
}

// ReleaseRun releases run's instances (release.Releaser.ReleaseRead), and returns the stack's
// problems as warnings. The items say how they go back (state.Home, written by every launch and
// claim), so the stack's pool documents are not read at all: the table is the stack's by name
// (state.TableName), the account is the one the items' ARNs name, and the doorbells are where the
// items' own are. Only a run that holds nothing readable reads the documents (for the account and
// the doorbells' place), and the run's items, as Release does.
func (w *Wiring) ReleaseRun(ctx context.Context, cfg release.Config, run string) (*release.Result, []error, error) {
	w.init()
	insts, readErr := state.ReadRun(ctx, w.Clients.DynamoDB, state.TableName(w.Stack), run)
	if (readErr == nil || errors.Is(readErr, state.ErrBadItem)) && selfDescribing(insts) {
		store, err := state.OpenFor(w.Clients.DynamoDB, state.TableName(w.Stack), insts)
		if err != nil {
			return nil, nil, err
		}
		var bells *doorbell.Bells
		if bell := insts[0].Bell; bell != "" {
			if bells, err = w.bells(bell); err != nil {
				return nil, nil, err
			}
		}
		rel, err := w.releaser(cfg, store, bells)
		if err != nil {
			return nil, nil, err
		}
		res, err := rel.ReleaseRead(ctx, run, insts, readErr)
		return res, nil, err
	}
	rel, warnings, err := w.Release(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	res, err := rel.Release(ctx, run)
	return res, warnings, err
}

// selfDescribing reports whether insts say all release needs without the pool documents: there
// are some, and all share one doorbell base (or none has a doorbell).
func selfDescribing(insts []state.Instance) bool {
	if len(insts) == 0 {
		return false
	}
	base := func(url string) string { return url[:strings.LastIndexByte(url, '/')+1] }
	for _, in := range insts {
		if base(in.Bell) != base(insts[0].Bell) {
			return false
		}
	}
	return true
}

// Release returns a releaser for the stack. The stack's pool documents are read once, for the
// table (every pool of a stack shares it) and for the pools the run's instances belong to;
// documents that could not be read are returned as warnings.
func (w *Wiring) Release(ctx context.Context, cfg release.Config) (*release.Releaser, []error, error) {
	w.init()
	stack, err := w.loader.LoadStack(ctx)
	if err != nil {
		return nil, nil, err
	}
	store, err := state.NewStore(w.Clients.DynamoDB, stack.Table, stack.Account)
	if err != nil {
		return nil, nil, err
	}
	store.HistoryRetention = stack.HistoryRetention()
	// The stack's doorbells live beside its pool queues; with no pool document readable there is
	// nothing to ring, and the agents notice the release on their next read.
	var bells *doorbell.Bells
	if len(stack.Pools) > 0 {
		if bells, err = w.bells(stack.Pools[0].QueueURL); err != nil {
			return nil, nil, err
		}
	}
	rel, err := w.releaser(cfg, store, bells)
	if err != nil {
		return nil, nil, err
	}
	var warnings []error
	if stack.Problems != nil {
		warnings = append(warnings, stack.Problems)
	}
	return rel, warnings, nil
}
