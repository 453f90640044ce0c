package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/hangar-ci/hangar/internal/wire/awscfg"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/operator"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// open wires an operator of the stack g names: the AWS configuration and credentials (checked
// before any request), the stack's pool documents, its table and its queues.
func open(ctx context.Context, g *globals) (*operator.Operator, error) {
	if err := g.validate(); err != nil {
		return nil, err
	}
	if err := names.ValidateStack(g.stack); err != nil {
		return nil, fmt.Errorf("%w: --stack: %w", errBadInput, err)
	}
	cfg, err := awscfg.Load(ctx)
	if err != nil {
		return nil, err
	}
	if cfg.Region == "" {
		return nil, fmt.Errorf("%w: no AWS region: set AWS_REGION (or a profile's region) to the stack's region", errBadInput)
	}
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return nil, fmt.Errorf("%w: no AWS credentials: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, to an identity that may read the stack (%w)", errBadInput, err)
	}
	ssmc := ssm.NewFromConfig(cfg)
	loader := &pooldoc.Loader{SSM: ssmc, Stack: g.stack}
	stack, err := loader.LoadStack(ctx)
	if errors.Is(err, pooldoc.ErrNoStack) {
		return nil, fmt.Errorf("%w: --stack: %w (in region %s)", errBadInput, err, cfg.Region)
	}
	if err != nil {
		return nil, fmt.Errorf("read stack %s: %w", g.stack, err)
	}
	store, err := state.NewStore(dynamodb.NewFromConfig(cfg), stack.Table, stack.Account)
	if err != nil {
		return nil, err
	}
	store.HistoryRetention = stack.HistoryRetention()
	sqsc := sqs.NewFromConfig(cfg)
	bells, err := doorbell.New(sqsc, g.stack, stack.Pools[0].QueueURL)
	if err != nil {
		return nil, err
	}
	return operator.New(operator.Deps{Stack: stack, Store: store, History: store, Queues: &offers.Directory{Loader: loader, SQS: sqsc},
		Documents: documents{client: ssmc, stack: g.stack}, Marker: store,
		Retirer: &pool.Pool{Stack: g.stack, Store: store, EC2: ec2.NewFromConfig(cfg), Bells: bells}})
}

// documents writes the stack's pool documents (drain, undrain).
type documents struct {
	client *ssm.Client
	stack  string
}

func (d documents) SetDrained(ctx context.Context, pool string, drained bool) (*pooldoc.Document, error) {
	return pooldoc.SetDrained(ctx, d.client, d.stack, pool, drained)
}
