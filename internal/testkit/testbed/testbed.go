// Package testbed gives integration tests SDK clients for the local AWS emulators (moto, DynamoDB
// Local, the EC2 metadata mock) that `make testbed-up` starts. Clients are configured by the
// standard environment only (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_DYNAMODB, AWS_REGION, keys), as
// the product's binaries are; this package only refuses to run against anything but loopback, so
// that a test can never touch a real AWS account.
//
// Under `go test -short` integration tests are skipped; otherwise a missing test bed fails the
// test with the command that starts it.
package testbed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Require skips t under -short and fails it unless the emulators are configured on loopback.
func Require(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs the local emulators (skipped with -short)")
	}
	for _, v := range []string{"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB"} {
		raw := os.Getenv(v)
		if raw == "" {
			t.Fatalf("%s is not set: start the emulators with `make testbed-up` and load .cache/testbed/endpoints.env (make test does both)", v)
		}
		u, err := url.Parse(raw)
		if err != nil || !isLoopback(u.Hostname()) {
			t.Fatalf("%s=%q is not a loopback address: integration tests only run against local emulators", v, raw)
		}
	}
}

func isLoopback(host string) bool {
	return host == "localhost" || host == "::1" || strings.HasPrefix(host, "127.")
}

// AWSConfig loads the SDK configuration the way the product does, from the environment.
func AWSConfig(t testing.TB) aws.Config {
	t.Helper()
	Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatalf("load AWS config: %v", err)
	}
	return cfg
}

// DynamoDB returns a DynamoDB client for DynamoDB Local. DynamoDB Local's error responses carry
// no CRC32 header, which the SDK would otherwise warn about on every lost conditional write.
func DynamoDB(t testing.TB) *dynamodb.Client {
	t.Helper()
	return dynamodb.NewFromConfig(AWSConfig(t), func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true })
}

// SQS returns an SQS client for moto.
func SQS(t testing.TB) *sqs.Client {
	t.Helper()
	return sqs.NewFromConfig(AWSConfig(t))
}

// Name returns a name unique to this test run, for tables and queues: prefix-<8 hex>. It uses only
// characters valid in both.
func Name(t testing.TB, prefix string) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + "-" + hex.EncodeToString(b)
}

// Context returns a context that ends with the test or after d.
func Context(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// ResetMoto clears every resource moto holds. Only for tests that own the whole emulator; most
// tests use unique names instead and run in parallel.
func ResetMoto(t testing.TB) {
	t.Helper()
	Require(t)
	req, err := http.NewRequest(http.MethodPost, strings.TrimRight(os.Getenv("AWS_ENDPOINT_URL"), "/")+"/moto-api/reset", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("reset moto: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reset moto: %s", resp.Status)
	}
}

// Account is the account moto reports (its default); tests key items by it.
const Account = "123456789012"

// Region returns the configured region.
func Region() string {
	if r := os.Getenv("AWS_REGION"); r != "" {
		return r
	}
	return "us-east-1"
}

// Environ returns the test's environment without the variables whose names start with any of
// drop: for a child process whose inputs the test sets itself.
func Environ(drop ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, p := range drop {
			if strings.HasPrefix(k, p) {
				keep = false
				break
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// WithEnv returns base followed by env's variables as KEY=value (later entries win in exec).
func WithEnv(base []string, env map[string]string) []string {
	out := slices.Clone(base)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}
