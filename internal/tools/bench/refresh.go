package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/wire/refreshwire"
	"github.com/hangar-ci/hangar/pkg/poolconfig"
	"github.com/hangar-ci/hangar/pkg/refresh"
	"github.com/hangar-ci/hangar/pkg/state"
)

func init() { register("refresh", benchRefresh) }

const (
	refreshItems       = 10000
	refreshExpired     = 10
	refreshPerPool     = 10 // items a pool may cost beyond its expired ones: its warm sets (empty here)
	refreshWallTarget  = 5 * time.Second
	bootstrapMaxBytes  = 20 << 20
	benchRefreshWorker = 16
)

// itemsRead counts the items DynamoDB reads for a client: Query's ScannedCount and the items
// GetItem and BatchGetItem return.
type itemsRead struct{ n atomic.Int64 }

func (c *itemsRead) option(o *dynamodb.Options) {
	o.DisableValidateResponseChecksum = true
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("hangarBenchItemsRead",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				switch r := out.Result.(type) {
				case *dynamodb.QueryOutput:
					c.n.Add(int64(r.ScannedCount))
				case *dynamodb.GetItemOutput:
					if r.Item != nil {
						c.n.Add(1)
					}
				case *dynamodb.BatchGetItemOutput:
					for _, items := range r.Responses {
						c.n.Add(int64(len(items)))
					}
				}
				return out, md, err
			}), middleware.After)
	})
}

func benchRefresh(ctx context.Context, _ benchConfig) ([]Row, error) {
	e, err := localenv.Start(ctx, localenv.Options{Baked: true})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	if err := e.UpdatePool(ctx, func(d *poolconfig.Document) { d.Warm = poolconfig.Warm{} }); err != nil {
		return nil, err
	}
	if err := seedFleet(ctx, e.Store, e.Pool); err != nil {
		return nil, err
	}

	var read itemsRead
	w := refreshwire.New(e.AWS, e.Stack, refreshwire.Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: io.Discard,
		DynamoDB: []func(*dynamodb.Options){read.option}})
	stack, deps, err := w.Load(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	rep, err := refresh.Run(ctx, refresh.Config{Stack: e.Stack, Pools: stack.Pools}, deps)
	took := time.Since(start)
	if err != nil {
		return nil, err
	}
	if rep.Pools[0].Expired != refreshExpired {
		return nil, fmt.Errorf("refresh expired %d of %d (errors: %v)", rep.Pools[0].Expired, refreshExpired, rep.Errors)
	}
	size, err := bootstrapSize(ctx)
	if err != nil {
		return nil, err
	}
	itemsTarget := 3*refreshExpired + refreshPerPool
	return []Row{
		{Metric: fmt.Sprintf("refresh over %d items, %d expired: items read", refreshItems, refreshExpired), Measured: fmt.Sprint(read.n.Load()),
			Target: fmt.Sprintf("≤ %d (3 × expired + %d per pool)", itemsTarget, refreshPerPool), OK: read.n.Load() <= int64(itemsTarget)},
		{Metric: fmt.Sprintf("refresh over %d items, %d expired: wall time", refreshItems, refreshExpired), Measured: secs(took),
			Target: "≤ " + secs(refreshWallTarget), OK: took <= refreshWallTarget},
		{Metric: "refresh bootstrap (linux/amd64, stripped) size", Measured: fmt.Sprintf("%.1f MB", float64(size)/(1<<20)),
			Target: fmt.Sprintf("≤ %d MB", bootstrapMaxBytes>>20), OK: size <= bootstrapMaxBytes},
	}, nil
}

// seedFleet writes refreshItems instances into pool: all running for a run, refreshExpired of
// them past their deadline.
func seedFleet(ctx context.Context, store *state.Store, pool string) error {
	insts := make([]*state.Instance, refreshItems)
	for i := range insts {
		insts[i] = &state.Instance{ID: fmt.Sprintf("i-%017x", 0xbe0000+i), Pool: pool, Threshold: time.Now().Add(time.Hour),
			Assignment: state.Assignment{RunID: fmt.Sprint(100 + i%50), Repo: "octo/bench"}}
	}
	if err := store.Create(ctx, insts); err != nil {
		return err
	}
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		first error
		once  sync.Once
	)
	for range benchRefreshWorker {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(insts) {
					return
				}
				in := insts[i]
				deadline := time.Now().Add(6 * time.Hour)
				if i < refreshExpired {
					deadline = time.Now().Add(-time.Minute)
				}
				_, err := store.Transition(ctx, state.Change{InstanceID: in.ID, Pool: pool, From: state.Created, To: state.Running,
					Version: 1, RunID: in.RunID, Threshold: deadline})
				if err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// bootstrapSize builds the refresh Lambda's bootstrap as make build does and returns its size.
func bootstrapSize(ctx context.Context) (int64, error) {
	dir, err := os.MkdirTemp("", "hangar-bootstrap-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "bootstrap")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", "lambda.norpc", "-ldflags", "-s -w", "-o", out, "./cmd/refresh")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("build bootstrap: %w\n%s", err, b)
	}
	st, err := os.Stat(out)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}
