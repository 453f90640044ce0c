package tokens

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"

	"github.com/aws/aws-sdk-go-v2/service/kms"
)

// ContextKey is the encryption-context key that names the instance. The instance role's policy
// conditions Decrypt on kms:EncryptionContext:instanceArn = ${ec2:SourceInstanceARN}.
const ContextKey = "instanceArn"

// Encrypter is the part of the KMS client the control plane uses: it may only encrypt.
type Encrypter interface {
	Encrypt(ctx context.Context, params *kms.EncryptInput, optFns ...func(*kms.Options)) (*kms.EncryptOutput, error)
}

// Decrypter is the part of the KMS client the agent uses.
type Decrypter interface {
	Decrypt(ctx context.Context, params *kms.DecryptInput, optFns ...func(*kms.Options)) (*kms.DecryptOutput, error)
}

var keyRe = regexp.MustCompile(`^(arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:(key|alias)/[A-Za-z0-9/_-]+|alias/[A-Za-z0-9/_-]+|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|mrk-[0-9a-f]{32})$`)

// ValidateKey checks a KMS key reference: a key or alias ARN, alias/<name>, a key id or a
// multi-Region key id.
func ValidateKey(key string) error {
	if !keyRe.MatchString(key) {
		return fmt.Errorf("%q: want a KMS key ARN, alias ARN, alias/<name> or key id", key)
	}
	return nil
}

// ErrNoToken is returned by Open for an empty sealed token.
var ErrNoToken = errors.New("no token")

// Sealer encrypts tokens for instances under one key.
type Sealer struct {
	KMS Encrypter
	Key string
}

// Seal returns token encrypted for the instance instanceARN, base64-encoded.
func (s Sealer) Seal(ctx context.Context, instanceARN, token string) (string, error) {
	if token == "" {
		return "", fmt.Errorf("seal a token for %s: %w", instanceARN, ErrNoToken)
	}
	out, err := s.KMS.Encrypt(ctx, &kms.EncryptInput{KeyId: &s.Key, Plaintext: []byte(token),
		EncryptionContext: map[string]string{ContextKey: instanceARN}})
	if err != nil {
		return "", fmt.Errorf("seal a token for %s with KMS key %s: %w", instanceARN, s.Key, err)
	}
	return base64.StdEncoding.EncodeToString(out.CiphertextBlob), nil
}

// Opener decrypts the tokens sealed for one instance.
type Opener struct {
	KMS         Decrypter
	Key         string
	InstanceARN string
}

// Open returns the token sealed for o.InstanceARN. KMS refuses ciphertext sealed for any other
// instance (the encryption context differs) or under another key.
func (o Opener) Open(ctx context.Context, sealed string) (string, error) {
	if sealed == "" {
		return "", ErrNoToken
	}
	blob, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil {
		return "", fmt.Errorf("open a token: not base64 KMS ciphertext: %w", err)
	}
	out, err := o.KMS.Decrypt(ctx, &kms.DecryptInput{CiphertextBlob: blob, KeyId: &o.Key,
		EncryptionContext: map[string]string{ContextKey: o.InstanceARN}})
	if err != nil {
		return "", fmt.Errorf("open a token for %s with KMS key %s: %w", o.InstanceARN, o.Key, err)
	}
	return string(out.Plaintext), nil
}
