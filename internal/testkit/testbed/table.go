package testbed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TableAdmin is the part of the DynamoDB client CreateTable uses.
type TableAdmin interface {
	CreateTable(ctx context.Context, params *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, params *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(ctx context.Context, params *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// TableInput returns the CreateTable request for Hangar's table, for tests and the local world:
// the schema of docs/design.md §2, which deployments get from the CDK stack (infra/stack/table.go).
func TableInput(name string) *dynamodb.CreateTableInput {
	s := func(n string) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(n), AttributeType: types.ScalarAttributeTypeS}
	}
	all := &types.Projection{ProjectionType: types.ProjectionTypeAll}
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			s(state.AttrARN), s(state.AttrRunID), s(state.AttrPoolStateShard),
			{AttributeName: aws.String(state.AttrThreshold), AttributeType: types.ScalarAttributeTypeN},
		},
		KeySchema: []types.KeySchemaElement{{AttributeName: aws.String(state.AttrARN), KeyType: types.KeyTypeHash}},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{
			{
				IndexName:  aws.String(state.IndexByRun),
				KeySchema:  []types.KeySchemaElement{{AttributeName: aws.String(state.AttrRunID), KeyType: types.KeyTypeHash}},
				Projection: all,
			},
			{
				IndexName: aws.String(state.IndexByPoolState),
				KeySchema: []types.KeySchemaElement{
					{AttributeName: aws.String(state.AttrPoolStateShard), KeyType: types.KeyTypeHash},
					{AttributeName: aws.String(state.AttrThreshold), KeyType: types.KeyTypeRange},
				},
				Projection: all,
			},
		},
	}
}

// CreateTable creates Hangar's table (for tests and the local world; deployments get it from the
// CDK stack), waits until it is active and turns on TTL. An existing table is left as it is.
func CreateTable(ctx context.Context, db TableAdmin, name string) error {
	_, err := db.CreateTable(ctx, TableInput(name))
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("create table %s: %w", name, err)
	}
	w := dynamodb.NewTableExistsWaiter(db, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 100*time.Millisecond, 2*time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: &name}, 2*time.Minute); err != nil {
		return fmt.Errorf("wait for table %s: %w", name, err)
	}
	_, err = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               &name,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(state.AttrTTL), Enabled: aws.Bool(true)},
	})
	if err != nil && !isTTLAlreadyOn(err) {
		return fmt.Errorf("turn on TTL for table %s: %w", name, err)
	}
	return nil
}

func isTTLAlreadyOn(err error) bool {
	var v interface{ ErrorMessage() string }
	return errors.As(err, &v) && strings.Contains(strings.ToLower(v.ErrorMessage()), "already enabled")
}
