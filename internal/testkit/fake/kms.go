package fake

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/kms"
)

// KMS seals plaintexts visibly (tokens.Encrypter): the ciphertext names the key and the
// encryption context, so that a test can tell which instance a token was sealed for.
type KMS struct {
	recorder
}

// Reset forgets recorded calls and injected errors.
func (k *KMS) Reset() { k.resetCalls() }

// Encrypt returns "sealed(<key>|<k=v,...>|<plaintext>)" as the ciphertext.
func (k *KMS) Encrypt(_ context.Context, in *kms.EncryptInput, _ ...func(*kms.Options)) (*kms.EncryptOutput, error) {
	if err := k.call("Encrypt"); err != nil {
		return nil, err
	}
	var ctx []string
	for _, key := range slices.Sorted(maps.Keys(in.EncryptionContext)) {
		ctx = append(ctx, key+"="+in.EncryptionContext[key])
	}
	key := ""
	if in.KeyId != nil {
		key = *in.KeyId
	}
	return &kms.EncryptOutput{CiphertextBlob: fmt.Appendf(nil, "sealed(%s|%s|%s)", key, strings.Join(ctx, ","), in.Plaintext), KeyId: in.KeyId}, nil
}
