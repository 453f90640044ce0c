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

// RotationGrace is how long after a secret's value changes the value before it is still
// accepted (Versions): long enough to set the new one on the other side, short enough that a
// rotation made because the old value leaked shuts it out soon.
const RotationGrace = time.Hour

// Secret is one Secrets Manager secret's string value, kept in memory for SecretTTL. It is safe
// for concurrent use.
type Secret struct {
	Client awsapi.SecretsManager
	ARN    string
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	mu      sync.Mutex
	value   string
	created time.Time // when the current value was put (Secrets Manager's CreatedDate)
	at      time.Time
	// previous is the AWSPREVIOUS stage's value ("" when none), read at prevAt (Versions).
	previous string
	prevAt   time.Time
}

func (s *Secret) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// read returns the value of the secret's version in stage (AWSCURRENT when empty) and when it
// was put. The caller holds s.mu.
func (s *Secret) read(ctx context.Context, stage string) (string, time.Time, error) {
	in := &secretsmanager.GetSecretValueInput{SecretId: &s.ARN}
	if stage != "" {
		in.VersionStage = aws.String(stage)
	}
	out, err := s.Client.GetSecretValue(ctx, in)
	if err != nil {
		return "", time.Time{}, err
	}
	created := aws.ToTime(out.CreatedDate)
	if out.SecretString != nil {
		return *out.SecretString, created, nil
	}
	return string(out.SecretBinary), created, nil
}

// Get returns the secret's value, read again when fresh is set or the kept one is older than
// SecretTTL. An empty secret (the stack creates them empty) is returned as "".
func (s *Secret) Get(ctx context.Context, fresh bool) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !fresh && !s.at.IsZero() && s.now().Sub(s.at) < SecretTTL {
		return s.value, nil
	}
	value, created, err := s.read(ctx, "")
	if err != nil {
		return "", fmt.Errorf("read secret %s: %w", s.ARN, err)
	}
	s.value, s.created, s.at = value, created, s.now()
	return s.value, nil
}

// Versions returns the secret's current value and, for RotationGrace after it was put, the value
// before it (stage AWSPREVIOUS, which PutSecretValue keeps): both are accepted while a rotation
// reaches the other side, and the old one no longer once the grace is over. Read again as Get is.
func (s *Secret) Versions(ctx context.Context, fresh bool) ([]string, error) {
	current, err := s.Get(ctx, fresh)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.created.IsZero() || s.now().Sub(s.created) >= RotationGrace {
		return []string{current}, nil
	}
	if fresh || s.prevAt.IsZero() || s.now().Sub(s.prevAt) >= SecretTTL {
		previous, _, err := s.read(ctx, "AWSPREVIOUS")
		if err != nil && !awserr.IsNotFound(err) {
			return nil, fmt.Errorf("read the previous version of secret %s: %w", s.ARN, err)
		}
		s.previous, s.prevAt = previous, s.now()
	}
	if s.previous == "" || s.previous == current {
		return []string{current}, nil
	}
	return []string{current, s.previous}, nil
}
