// Package refreshwire builds refresh's dependencies from an AWS configuration, for the refresh
// command and for tests. It is apart from the action's wiring so that the Lambda links nothing of
// GitHub.
package refreshwire

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/hangar-ci/hangar/pkg/fleet"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/poolconfig"
	"github.com/hangar-ci/hangar/pkg/refresh"
	"github.com/hangar-ci/hangar/pkg/state"
)

// EC2 is every EC2 call refresh makes.
type EC2 interface {
	refresh.EC2
	fleet.EC2
}

// Wiring is what a refresh runs with.
type Wiring struct {
	Docs     []*poolconfig.Document
	Deps     refresh.Deps
	Store    *state.Store
	Warnings []string
}

// New reads the stack's pool documents and builds refresh's dependencies. ec2Client replaces the
// EC2 client when set (tests count or break its calls through it).
func New(ctx context.Context, cfg aws.Config, stack string, ec2Client EC2, log *slog.Logger, metrics io.Writer, ddbOpts ...func(*dynamodb.Options)) (*Wiring, error) {
	loader := &poolconfig.Loader{SSM: ssm.NewFromConfig(cfg), Stack: stack}
	docs, err := loader.LoadAll(ctx)
	w := &Wiring{Docs: docs}
	if err != nil {
		w.Warnings = append(w.Warnings, err.Error()) // a broken pool does not stop the others
	}
	if len(docs) == 0 && err != nil {
		return nil, fmt.Errorf("stack %q: no readable pool document under %s: %w", stack, poolconfig.ParameterPath(stack), err)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("stack %q: no pool documents under %s: is HANGAR_STACK right?", stack, poolconfig.ParameterPath(stack))
	}
	if w.Store, err = state.NewStore(dynamodb.NewFromConfig(cfg, ddbOpts...), docs[0].Table, docs[0].StateAccount()); err != nil {
		return nil, err
	}
	if ec2Client == nil {
		ec2Client = ec2.NewFromConfig(cfg)
	}
	sqsClient := sqs.NewFromConfig(cfg)
	dir := &pool.Directory{Loader: loader, SQS: sqsClient}
	w.Deps = refresh.Deps{
		Store: w.Store, EC2: ec2Client, Launcher: &fleet.Launcher{EC2: ec2Client, Log: log}, Log: log, Metrics: metrics,
		Queue: func(name string) (refresh.Publisher, error) { return dir.Queue(ctx, name) },
		Depth: func(ctx context.Context, name string) (int, error) {
			q, err := dir.Queue(ctx, name)
			if err != nil {
				return 0, err
			}
			out, err := sqsClient.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(q.URL()),
				AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages}})
			if err != nil {
				return 0, err
			}
			return strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
		},
	}
	return w, nil
}
