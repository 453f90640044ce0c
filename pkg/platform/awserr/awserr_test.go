package awserr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	api := func(code string) error {
		return fmt.Errorf("create fleet: %w", &smithy.GenericAPIError{Code: code, Message: "m"})
	}
	tests := []struct {
		name string
		err  error
		want Kind
	}{
		{"nil", nil, Unknown},
		{"plain error", errors.New("boom"), Unknown},
		{"canceled", fmt.Errorf("wait: %w", context.Canceled), Canceled},
		{"deadline", context.DeadlineExceeded, Canceled},
		{"capacity", api("InsufficientInstanceCapacity"), Capacity},
		{"instance still stopping", api("IncorrectInstanceState"), WrongState},
		{"spot price", api("SpotMaxPriceTooLow"), Capacity},
		{"type not in AZ", api("Unsupported"), Capacity},
		{"throttled ec2", api("RequestLimitExceeded"), Throttled},
		{"throttled ddb", api("ProvisionedThroughputExceededException"), Throttled},
		{"missing instance", api("InvalidInstanceID.NotFound"), NotFound},
		{"missing queue", api("AWS.SimpleQueueService.NonExistentQueue"), NotFound},
		{"missing table", api("ResourceNotFoundException"), NotFound},
		{"missing subnet is permanent", api("InvalidSubnetID.NotFound"), Permanent},
		{"missing template is permanent", api("InvalidLaunchTemplateId.NotFound"), Permanent},
		{"lost race", api("ConditionalCheckFailedException"), ConditionFailed},
		{"bad ami", api("InvalidAMIID.Malformed"), Permanent},
		{"denied", api("UnauthorizedOperation"), Permanent},
		{"malformed id", api("InvalidInstanceID.Malformed"), Permanent},
		{"role", api("InvalidIamInstanceProfile.Name"), Permanent},
		{"unknown code", api("SomethingNew"), Unknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, Classify(tc.err), "error %v", tc.err)
			require.Equal(t, tc.want == Capacity, Is(tc.err, Capacity))
		})
	}
}

func TestCode(t *testing.T) {
	t.Parallel()
	require.Equal(t, "Throttling", Code(fmt.Errorf("x: %w", &smithy.GenericAPIError{Code: "Throttling"})))
	require.Empty(t, Code(errors.New("plain")))
	require.Equal(t, "capacity", Capacity.String())
}

func TestIgnoreNotFound(t *testing.T) {
	t.Parallel()
	gone := fmt.Errorf("terminate: %w", &smithy.GenericAPIError{Code: "InvalidInstanceID.NotFound"})
	denied := fmt.Errorf("terminate: %w", &smithy.GenericAPIError{Code: "UnauthorizedOperation"})
	lost := fmt.Errorf("update: %w", &smithy.GenericAPIError{Code: "ConditionalCheckFailedException"})
	require.NoError(t, IgnoreNotFound(gone))
	require.NoError(t, IgnoreNotFound(nil))
	require.Same(t, denied, IgnoreNotFound(denied))
	require.True(t, IsNotFound(gone))
	require.False(t, IsNotFound(denied))
	require.True(t, IsConditionFailed(lost))
	require.False(t, IsConditionFailed(gone))
}
