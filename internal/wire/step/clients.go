package step

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/hangar-ci/hangar/internal/wire/awscfg"
)

// Clients are the AWS clients of a step, from the standard configuration chain (environment,
// OIDC web identity, profiles; AWS_ENDPOINT_URL* for local emulators).
type Clients struct {
	AWS      aws.Config
	DynamoDB *dynamodb.Client
	EC2      *ec2.Client
	SQS      *sqs.Client
	SSM      *ssm.Client
}

// NewClients loads the AWS configuration.
func NewClients(ctx context.Context) (*Clients, error) {
	cfg, err := awscfg.Load(ctx)
	if err != nil {
		return nil, err
	}
	if cfg.Region == "" {
		return nil, fmt.Errorf("no AWS region: set AWS_REGION (aws-actions/configure-aws-credentials does)")
	}
	return &Clients{AWS: cfg, DynamoDB: dynamodb.NewFromConfig(cfg), EC2: ec2.NewFromConfig(cfg),
		SQS: sqs.NewFromConfig(cfg), SSM: ssm.NewFromConfig(cfg)}, nil
}
