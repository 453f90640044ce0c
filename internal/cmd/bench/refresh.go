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

	"github.com/hangar-ci/hangar/internal/testkit/lambdaemu"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
	"github.com/hangar-ci/hangar/internal/wire/refreshwire"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/refresh"
)

func init() { register("refresh", benchRefresh) }

const (
	refreshItems       = 10000
	refreshExpired     = 10
	refreshPerPool     = 10 // items a pool may cost beyond its expired ones: its warm sets (empty here)
	refreshWallTarget  = time.Second
	coldStartTarget    = 100 * time.Millisecond
	coldStarts         = 10
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
	if err := e.UpdatePool(ctx, func(d *pooldoc.Document) { d.Warm = pooldoc.Warm{} }); err != nil {
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
	dir, err := os.MkdirTemp("", "hangar-bootstrap-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bootstrap, size, err := buildBootstrap(ctx, dir)
	if err != nil {
		return nil, err
	}
	starts, err := coldStartTimes(ctx, e, bootstrap)
	if err != nil {
		return nil, err
	}
	ops, err := operatorRows(ctx, e)
	if err != nil {
		return nil, err
	}
	itemsTarget := 3*refreshExpired + refreshPerPool
	return append([]Row{
		row(fmt.Sprintf("refresh over %d items, %d expired: items read", refreshItems, refreshExpired), "items", float64(read.n.Load()), float64(itemsTarget),
			fmt.Sprintf("≤ %d (3 × expired + %d per pool)", itemsTarget, refreshPerPool)),
		row(fmt.Sprintf("refresh over %d items, %d expired: wall time", refreshItems, refreshExpired), "s", took.Seconds(), refreshWallTarget.Seconds(),
			"≤ "+secs(refreshWallTarget)),
		row("refresh bootstrap size (linux/amd64, stripped)", "MB", float64(size)/(1<<20), bootstrapMaxBytes>>20, fmt.Sprintf("≤ %d MB", bootstrapMaxBytes>>20)),
		timed("refresh cold start: process start → first event handled", starts, coldStartTarget, false).
			note("an EC2 state-change event that needs no AWS call, through a local Lambda Runtime API"),
	}, ops...), nil
}

// coldStartTimes starts the bootstrap coldStarts times, each time timing from the process's start
// to the answer to its first event.
func coldStartTimes(ctx context.Context, e *localenv.Env, bootstrap string) ([]time.Duration, error) {
	event := []byte(`{"source":"aws.ec2","detail-type":"EC2 Instance State-change Notification","detail":{"instance-id":"i-0123456789abcdef0","state":"running"}}`)
	var out []time.Duration
	for range coldStarts {
		start := time.Now()
		fn, err := lambdaemu.Start(lambdaemu.Function{Name: pooldoc.RefreshEventsFunction(e.Stack), Bootstrap: bootstrap,
			Env: append(e.Environ(), "HANGAR_STACK="+e.Stack, pooldoc.RefreshSourceEnv+"="+pooldoc.RefreshSourceEventBridge)})
		if err != nil {
			return nil, err
		}
		res, err := fn.Invoke(ctx, event)
		took := time.Since(start)
		logs := fn.Logs()
		fn.Close()
		if err != nil {
			return nil, err
		}
		if res.Error {
			return nil, fmt.Errorf("cold start: the function failed: %s\n%s", res.Payload, logs)
		}
		out = append(out, took)
	}
	return out, nil
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

// buildBootstrap builds the refresh Lambda's bootstrap into dir as make build does and returns its
// path and size.
func buildBootstrap(ctx context.Context, dir string) (string, int64, error) {
	out := filepath.Join(dir, "bootstrap")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", "lambda.norpc,"+testbuild.Tags, "-ldflags", "-s -w", "-o", out, "./cmd/refresh")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", 0, fmt.Errorf("build bootstrap: %w\n%s", err, b)
	}
	st, err := os.Stat(out)
	if err != nil {
		return "", 0, err
	}
	return out, st.Size(), nil
}
