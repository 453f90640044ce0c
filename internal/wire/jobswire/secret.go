package jobswire

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/platform/awserr"
)

// SecretTTL is how long a secret's value is used before it is read again: a rotated secret is
// picked up within it (at once, when an answer shows the old one is refused).
const SecretTTL = 5 * time.Minute

// Secret is one Secrets Manager secret's string value, kept in memory for SecretTTL. It is safe
// for concurrent use.
type Secret struct {
	Client awsapi.SecretsManager
	ARN    string

	mu    sync.Mutex
	value string
	at    time.Time
	// previous is the AWSPREVIOUS stage's value ("" when none), read at prevAt (Versions).
	previous string
	prevAt   time.Time
}

// Get returns the secret's value, read again when fresh is set or the kept one is older than
// SecretTTL. An empty secret (the stack creates them empty) is returned as "".
func (s *Secret) Get(ctx context.Context, fresh bool) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !fresh && !s.at.IsZero() && time.Since(s.at) < SecretTTL {
		return s.value, nil
	}
	out, err := s.Client.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: &s.ARN})
	if err != nil {
		return "", fmt.Errorf("read secret %s: %w", s.ARN, err)
	}
	s.at = time.Now()
	if out.SecretString != nil {
		s.value = *out.SecretString
	} else {
		s.value = string(out.SecretBinary)
	}
	return s.value, nil
}

// Versions returns the secret's current value and, when Secrets Manager still has one, the value
// before it (stage AWSPREVIOUS, which PutSecretValue keeps): both are accepted while a rotation
// reaches the other side. Read again as Get is.
func (s *Secret) Versions(ctx context.Context, fresh bool) ([]string, error) {
	current, err := s.Get(ctx, fresh)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if fresh || s.prevAt.IsZero() || time.Since(s.prevAt) >= SecretTTL {
		s.previous, s.prevAt = "", time.Now()
		out, err := s.Client.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: &s.ARN, VersionStage: aws.String("AWSPREVIOUS")})
		switch {
		case err == nil && out.SecretString != nil:
			s.previous = *out.SecretString
		case err == nil:
			s.previous = string(out.SecretBinary)
		case !awserr.IsNotFound(err):
			return nil, fmt.Errorf("read the previous version of secret %s: %w", s.ARN, err)
		}
	}
	if s.previous == "" || s.previous == current {
		return []string{current}, nil
	}
	return []string{current, s.previous}, nil
}
