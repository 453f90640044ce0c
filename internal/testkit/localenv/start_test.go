package localenv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

func TestStartWithoutTheEmulatorsSaysSo(t *testing.T) {
	t.Setenv("HANGAR_TESTBED_IMDS_BIN", "")
	var (
		e   *localenv.Env
		err error
	)
	require.NotPanics(t, func() { e, err = localenv.Start(context.Background(), localenv.Options{}) })
	require.Nil(t, e)
	require.ErrorContains(t, err, "HANGAR_TESTBED_IMDS_BIN")
	require.ErrorContains(t, err, "make testbed-up")
}

// A failure after Start has created things returns its cause, not a panic, and removes them.
func TestStartFailureReturnsTheCauseAndCleansUp(t *testing.T) {
	testbed.Require(t)
	ctx := testbed.Context(t, 3*time.Minute)
	stack := testbed.Name(t, "localenv")
	var (
		e   *localenv.Env
		err error
	)
	require.NotPanics(t, func() {
		e, err = localenv.Start(ctx, localenv.Options{Stack: stack, Market: "reserved", Dir: t.TempDir()})
	})
	require.Nil(t, e)
	require.ErrorContains(t, err, "publish pool linux-x64")
	require.ErrorContains(t, err, `market: "reserved"`)

	// The table, the queues and the launch template Start had created are gone.
	_, err = testbed.DynamoDB(t).DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(state.TableName(stack))})
	var notFound *ddbtypes.ResourceNotFoundException
	require.True(t, errors.As(err, &notFound), "the table is left: %v", err)
	for _, q := range []string{stack + "-linux-x64", stack + "-linux-x64-dlq"} {
		_, err := testbed.SQS(t).GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(q)})
		require.Error(t, err, "queue %s is left", q)
	}
	_, err = ec2.NewFromConfig(testbed.AWSConfig(t)).DescribeLaunchTemplates(ctx,
		&ec2.DescribeLaunchTemplatesInput{LaunchTemplateNames: []string{stack + "-linux-x64"}})
	require.Error(t, err, "the launch template is left")
	require.ErrorContains(t, err, "NotFound")
}
