package tokens_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/tokens"
)

const (
	arnA = "arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0"
	arnB = "arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef1"
)

func newKey(t *testing.T, client *kms.Client) string {
	t.Helper()
	out, err := client.CreateKey(testbed.Context(t, 10*time.Second), &kms.CreateKeyInput{})
	require.NoError(t, err)
	return *out.KeyMetadata.Arn
}

// TestSealedForOneInstance: against the emulator's KMS, a token sealed for instance A opens
// only with A's ARN in the context and A's key; B's context, another key, or tampered ciphertext
// are refused.
func TestSealedForOneInstance(t *testing.T) {
	t.Parallel()
	testbed.Require(t)
	ctx := testbed.Context(t, 30*time.Second)
	client := kms.NewFromConfig(testbed.AWSConfig(t))
	key, other := newKey(t, client), newKey(t, client)

	sealed, err := tokens.Sealer{KMS: client, Key: key}.Seal(ctx, arnA, "AREGTOKEN")
	require.NoError(t, err)
	require.NotContains(t, sealed, "AREGTOKEN")

	got, err := tokens.Opener{KMS: client, Key: key, InstanceARN: arnA}.Open(ctx, sealed)
	require.NoError(t, err)
	require.Equal(t, "AREGTOKEN", got)

	tests := []struct {
		name   string
		opener tokens.Opener
		sealed string
	}{
		{"another instance's context", tokens.Opener{KMS: client, Key: key, InstanceARN: arnB}, sealed},
		{"no instance in the context", tokens.Opener{KMS: client, Key: key}, sealed},
		{"another key", tokens.Opener{KMS: client, Key: other, InstanceARN: arnA}, sealed},
		{"not ciphertext", tokens.Opener{KMS: client, Key: key, InstanceARN: arnA}, "AREGTOKEN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.opener.Open(ctx, tc.sealed)
			require.Error(t, err)
			require.Empty(t, got)
		})
	}
	_, err = tokens.Opener{KMS: client, Key: key, InstanceARN: arnA}.Open(ctx, "")
	require.ErrorIs(t, err, tokens.ErrNoToken)
	_, err = tokens.Sealer{KMS: client, Key: key}.Seal(ctx, arnA, "")
	require.ErrorIs(t, err, tokens.ErrNoToken)
}

func TestValidateKey(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
		"arn:aws:kms:us-east-1:123456789012:alias/hangar-tokens", "alias/hangar-tokens",
		"1234abcd-12ab-34cd-56ef-1234567890ab", "mrk-1234abcd12ab34cd56ef1234567890ab"} {
		require.NoError(t, tokens.ValidateKey(ok), ok)
	}
	for _, bad := range []string{"", "hangar-tokens", "arn:aws:s3:::bucket", "alias/has space"} {
		require.Error(t, tokens.ValidateKey(bad), bad)
	}
}
