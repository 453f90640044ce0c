package jobswire_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/internal/wire/jobswire"
)

// TestSecretVersions: against the emulator's Secrets Manager, a secret never rotated has one
// version; after PutSecretValue the new value comes first and the one before it second (stage
// AWSPREVIOUS), so that deliveries signed with either are taken while the App's setting catches
// up; once RotationGrace has passed since the new value was put, the old one is refused.
func TestSecretVersions(t *testing.T) {
	testbed.Require(t)
	ctx := testbed.Context(t, time.Minute)
	client := secretsmanager.NewFromConfig(testbed.AWSConfig(t))
	out, err := client.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(testbed.Name(t, "whsec")), SecretString: aws.String("first")})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = client.DeleteSecret(ctx, &secretsmanager.DeleteSecretInput{SecretId: out.ARN, ForceDeleteWithoutRecovery: aws.Bool(true)})
	})
	s := &jobswire.Secret{Client: client, ARN: aws.ToString(out.ARN)}
	vs, err := s.Versions(ctx, false)
	require.NoError(t, err)
	require.Equal(t, []string{"first"}, vs)

	_, err = client.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: out.ARN, SecretString: aws.String("second")})
	require.NoError(t, err)
	vs, err = s.Versions(ctx, false)
	require.NoError(t, err)
	require.Equal(t, []string{"first"}, vs, "kept for SecretTTL unless asked afresh")
	vs, err = s.Versions(ctx, true)
	require.NoError(t, err)
	require.Equal(t, []string{"second", "first"}, vs)

	s.Now = func() time.Time { return time.Now().Add(jobswire.RotationGrace + time.Minute) }
	vs, err = s.Versions(ctx, true)
	require.NoError(t, err)
	require.Equal(t, []string{"second"}, vs, "the grace is over: the old value is refused")
}
