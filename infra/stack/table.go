package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/jsii-runtime-go"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// table is the state table of docs/design.md §2, exactly as testbed.TableInput (internal/testkit/testbed) declares it for tests.
type table struct{ t awsdynamodb.Table }

func newTable(stack awscdk.Stack, name string) *table {
	s := func(n string) *awsdynamodb.Attribute {
		return &awsdynamodb.Attribute{Name: jsii.String(n), Type: awsdynamodb.AttributeType_STRING}
	}
	t := awsdynamodb.NewTable(stack, jsii.String("Instances"), &awsdynamodb.TableProps{
		TableName:           jsii.String(state.TableName(name)),
		PartitionKey:        s(state.AttrARN),
		BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
		TimeToLiveAttribute: jsii.String(state.AttrTTL),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		Encryption:    awsdynamodb.TableEncryption_AWS_MANAGED,
		RemovalPolicy: awscdk.RemovalPolicy_RETAIN,
	})
	t.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
		IndexName: jsii.String(state.IndexByRun), PartitionKey: s(state.AttrRunID), ProjectionType: awsdynamodb.ProjectionType_ALL,
	})
	t.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
		IndexName: jsii.String(state.IndexByPoolState), PartitionKey: s(state.AttrPoolStateShard),
		SortKey:        &awsdynamodb.Attribute{Name: jsii.String(state.AttrThreshold), Type: awsdynamodb.AttributeType_NUMBER},
		ProjectionType: awsdynamodb.ProjectionType_ALL,
	})
	return &table{t: t}
}
