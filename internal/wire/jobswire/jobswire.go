// Package jobswire builds the two functions of label-routed jobs from an AWS configuration and
// their environment, for cmd/webhook, the local world and the tests: the webhook function
// (package webhook, behind a Function URL) and the dispatcher (package dispatch, fed by the jobs
// and returns queues). Each is built once, before the first event; it makes no request but the
// dispatcher's read of the stack's pool documents.
package jobswire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/labels/dispatch"
	"github.com/hangar-ci/hangar/pkg/labels/webhook"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/platform/ghapp"
	"github.com/hangar-ci/hangar/pkg/platform/ghurl"
	"github.com/hangar-ci/hangar/pkg/platform/metrics"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
	"github.com/hangar-ci/hangar/pkg/pool/pricing"
)

// The roles one binary plays, by HANGAR_WEBHOOK_ROLE.
const (
	RoleIngress  = "ingress"
	RoleDispatch = "dispatch"
)

// The environment the CDK stack gives the two functions.
const (
	EnvStack            = "HANGAR_STACK"
	EnvRole             = "HANGAR_WEBHOOK_ROLE"
	EnvJobsQueueURL     = "HANGAR_JOBS_QUEUE_URL"
	EnvReturnsQueueARN  = "HANGAR_RETURNS_QUEUE_ARN"
	EnvWebhookSecretARN = "HANGAR_WEBHOOK_SECRET_ARN"
	EnvAppSecretARN     = "HANGAR_APP_SECRET_ARN"
	EnvGitHubAPIURL     = "HANGAR_GITHUB_API_URL"
	// EnvCheckAfter shortens the bound of a job's runner (a duration; tests and the demo).
	EnvCheckAfter = "HANGAR_CHECK_AFTER"
	// EnvSweepEvery is the period of the stack's sweep schedule (a duration).
	EnvSweepEvery = "HANGAR_SWEEP_EVERY"
	// EnvMissingAfter shortens how long a queued job may go unrecorded before the sweep admits
	// it (a duration; tests and the demo).
	EnvMissingAfter = "HANGAR_MISSING_AFTER"
)

// Env is the functions' environment.
type Env struct {
	Stack, Role, JobsQueueURL, ReturnsQueueARN, WebhookSecretARN, AppSecretARN, GitHubAPIURL string
	CheckAfter, SweepEvery, MissingAfter                                                     time.Duration
}

// EnvFrom reads the environment with getenv and checks what the role needs; the error names every
// variable that is missing or malformed.
func EnvFrom(getenv func(string) string) (Env, error) {
	e := Env{Stack: getenv(EnvStack), Role: getenv(EnvRole), JobsQueueURL: getenv(EnvJobsQueueURL),
		ReturnsQueueARN: getenv(EnvReturnsQueueARN), WebhookSecretARN: getenv(EnvWebhookSecretARN),
		AppSecretARN: getenv(EnvAppSecretARN), GitHubAPIURL: getenv(EnvGitHubAPIURL)}
	var errs []error
	need := func(name, v, what string) {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is not set: want %s", name, what))
		}
	}
	if err := names.ValidateStack(e.Stack); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", EnvStack, err))
	}
	need(EnvJobsQueueURL, e.JobsQueueURL, "the jobs queue's URL")
	switch e.Role {
	case RoleIngress:
		need(EnvWebhookSecretARN, e.WebhookSecretARN, "the webhook secret's ARN")
	case RoleDispatch:
		need(EnvReturnsQueueARN, e.ReturnsQueueARN, "the returns queue's ARN")
		need(EnvAppSecretARN, e.AppSecretARN, "the App secret's ARN")
		if err := ghurl.CheckURL(e.GitHubAPIURL); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", EnvGitHubAPIURL, err))
		}
		for name, d := range map[string]*time.Duration{EnvCheckAfter: &e.CheckAfter, EnvSweepEvery: &e.SweepEvery, EnvMissingAfter: &e.MissingAfter} {
			if v := getenv(name); v != "" {
				var err error
				if *d, err = time.ParseDuration(v); err != nil || *d <= 0 {
					errs = append(errs, fmt.Errorf("%s %q: want a duration such as 30s", name, v))
				}
			}
		}
	default:
		errs = append(errs, fmt.Errorf("%s %q: want %s (the Function URL's) or %s (the queues')", EnvRole, e.Role, RoleIngress, RoleDispatch))
	}
	return e, errors.Join(errs...)
}

// Options adjust the wiring.
type Options struct {
	Log *slog.Logger
	// Metrics receives the embedded-metric-format lines (the Lambda's stdout).
	Metrics io.Writer
	// DynamoDB adjusts the DynamoDB client (tests turn off DynamoDB Local's missing checksums).
	DynamoDB []func(*dynamodb.Options)
	// GitHub is the transport to GitHub's API (http.DefaultTransport when nil; the local world's
	// trusts its stand-in).
	GitHub http.RoundTripper
	// PoolsTTL is how long pool documents are kept (pooldoc.DefaultCacheTTL when 0).
	PoolsTTL time.Duration
	// EC2 replaces the dispatcher's EC2 client (tests count or break its calls through it).
	EC2 awsapi.EC2
}

func (o *Options) defaults() {
	if o.Log == nil {
		o.Log = slog.Default()
	}
}

// Ingress builds the webhook function's handler.
func Ingress(cfg aws.Config, env Env, o Options) (*webhook.Handler, error) {
	o.defaults()
	o.Log = o.Log.With("component", "webhook")
	secret := &Secret{Client: secretsmanager.NewFromConfig(cfg), ARN: env.WebhookSecretARN}
	return webhook.New(webhook.Config{Stack: env.Stack, JobsQueueURL: env.JobsQueueURL}, webhook.Deps{
		Secret: func(ctx context.Context, fresh bool) ([][]byte, error) {
			vs, err := secret.Versions(ctx, fresh)
			out := make([][]byte, len(vs))
			for i, v := range vs {
				out[i] = []byte(v)
			}
			return out, err
		},
		Queue:    sqs.NewFromConfig(cfg),
		Pools:    &pooldoc.Cache{SSM: ssm.NewFromConfig(cfg), Stack: env.Stack, TTL: o.PoolsTTL, Log: o.Log},
		DynamoDB: dynamodb.NewFromConfig(cfg, o.DynamoDB...),
		Log:      o.Log,
		Metrics:  &metrics.Writer{Out: o.Metrics},
	})
}

// Dispatcher builds the dispatcher, and returns the GitHub App it acts as (its token count is
// reported by the benchmarks). It reads the stack's pool documents once, for the account and
// region its doorbells live in.
func Dispatcher(ctx context.Context, cfg aws.Config, env Env, o Options) (*dispatch.Dispatcher, *ghapp.App, error) {
	o.defaults()
	o.Log = o.Log.With("component", "dispatch")
	ssmClient := ssm.NewFromConfig(cfg)
	pools := &pooldoc.Cache{SSM: ssmClient, Stack: env.Stack, TTL: o.PoolsTTL, Log: o.Log}
	stack, err := pools.LoadStack(ctx)
	if err != nil {
		return nil, nil, err
	}
	sqsClient := sqs.NewFromConfig(cfg)
	bells, err := doorbell.New(sqsClient, env.Stack, stack.Pools[0].QueueURL)
	if err != nil {
		return nil, nil, err
	}
	ddb := dynamodb.NewFromConfig(cfg, o.DynamoDB...)
	store, err := state.NewStore(ddb, stack.Table, stack.Account)
	if err != nil {
		return nil, nil, err
	}
	store.HistoryRetention = stack.HistoryRetention()
	secret := &Secret{Client: secretsmanager.NewFromConfig(cfg), ARN: env.AppSecretARN}
	app := ghapp.New(env.GitHubAPIURL, func(ctx context.Context, fresh bool) (ghapp.Credentials, error) {
		s, err := secret.Get(ctx, fresh)
		if err != nil {
			return ghapp.Credentials{}, err
		}
		return ghapp.ParseCredentials(s)
	}, o.GitHub)
	prices := pricing.NewFromConfig(cfg)
	prices.Log = o.Log
	var ec2Client awsapi.EC2 = ec2.NewFromConfig(cfg)
	if o.EC2 != nil {
		ec2Client = o.EC2
	}
	appClient, err := app.AppClient()
	if err != nil {
		return nil, nil, err
	}
	d, err := dispatch.New(dispatch.Config{Stack: env.Stack, JobsQueueURL: env.JobsQueueURL, CheckAfter: env.CheckAfter,
		SweepEvery: env.SweepEvery, MissingAfter: env.MissingAfter}, dispatch.Deps{
		Pools: pools, Events: store, Waiting: store,
		Pool: &pool.Pool{Stack: env.Stack, Store: store, EC2: ec2Client, Queues: &offers.Directory{Loader: &pooldoc.Loader{SSM: ssmClient, Stack: env.Stack}, SQS: sqsClient},
			Launcher: &fleet.Launcher{EC2: ec2Client, Log: o.Log}, Bells: bells, Prices: prices, Log: o.Log},
		GitHub: func(installation int64, scope ghapi.Scope) (dispatch.Runners, error) {
			return app.Client(installation, scope)
		},
		App: appClient, Cursors: store,
		SQS: sqsClient, Log: o.Log, Metrics: &metrics.Writer{Out: o.Metrics},
	})
	return d, app, err
}
