// Package refreshwire builds refresh's dependencies from an AWS configuration, for the refresh
// command, the Lambda and tests. It is apart from the action's wiring so that the Lambda links
// nothing of GitHub.
package refreshwire

import (
	"context"
	"io"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
	"github.com/hangar-ci/hangar/pkg/pool/pricing"
	"github.com/hangar-ci/hangar/pkg/refresh"
	"github.com/hangar-ci/hangar/pkg/refresh/spend"
)

// Options adjust the wiring.
type Options struct {
	// EC2 replaces the EC2 client (tests count or break its calls through it).
	EC2 awsapi.EC2
	Log *slog.Logger
	// Metrics receives the embedded-metric-format lines (the Lambda's stdout).
	Metrics io.Writer
	// DynamoDB adjusts the DynamoDB client (tests turn off DynamoDB Local's missing checksums).
	DynamoDB []func(*dynamodb.Options)
}

// Wiring holds refresh's clients for one stack. Build it once (the Lambda does, before
// lambda.Start); Load reads the stack for each refresh.
type Wiring struct {
	stack    string
	ssm      *ssm.Client
	dynamodb *dynamodb.Client
	sqs      *sqs.Client
	ec2      awsapi.EC2
	log      *slog.Logger
	metrics  io.Writer
	launcher *fleet.Launcher // keeps instance type sizes across invokes
	prices   *pricing.Pricer // keeps on-demand prices across invokes
}

// New builds the clients; it makes no request.
func New(cfg aws.Config, stack string, o Options) *Wiring {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.EC2 == nil {
		o.EC2 = ec2.NewFromConfig(cfg)
	}
	return &Wiring{stack: stack, ssm: ssm.NewFromConfig(cfg), dynamodb: dynamodb.NewFromConfig(cfg, o.DynamoDB...),
		sqs: sqs.NewFromConfig(cfg), ec2: o.EC2, log: o.Log, metrics: o.Metrics,
		launcher: &fleet.Launcher{EC2: o.EC2, Log: o.Log}, prices: pricing.NewFromConfig(cfg)}
}

// Load reads the stack's pool documents, anew on every call so that a redeployed stack is seen
// at the next refresh, and returns them with refresh's dependencies.
func (w *Wiring) Load(ctx context.Context) (*pooldoc.Stack, refresh.Deps, error) {
	loader := &pooldoc.Loader{SSM: w.ssm, Stack: w.stack}
	stack, err := loader.LoadStack(ctx)
	if err != nil {
		return nil, refresh.Deps{}, err
	}
	store, err := state.NewStore(w.dynamodb, stack.Table, stack.Account)
	if err != nil {
		return nil, refresh.Deps{}, err
	}
	store.HistoryRetention = stack.HistoryRetention()
	var bells *doorbell.Bells
	if len(stack.Pools) > 0 {
		if bells, err = doorbell.New(w.sqs, w.stack, stack.Pools[0].QueueURL); err != nil {
			return nil, refresh.Deps{}, err
		}
	}
	w.prices.Log = w.log
	dir := &offers.Directory{Loader: loader, SQS: w.sqs}
	deps := refresh.Deps{Store: store, Log: w.log, Metrics: w.metrics, Pools: dir,
		Pool: &pool.Pool{Stack: w.stack, Store: store, EC2: w.ec2, Queues: dir, Launcher: w.launcher, Bells: bells, Prices: w.prices, Log: w.log}}
	if w.metrics != nil {
		if deps.Spend, err = spend.New(store, w.metrics, spend.Config{Stack: w.stack}); err != nil {
			return nil, refresh.Deps{}, err
		}
	}
	return stack, deps, nil
}
