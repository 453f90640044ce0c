// Package awscfg loads the AWS SDK configuration every Hangar binary uses: the standard
// environment and credential chain, and one retry policy. Retries are the SDK retryer's job
// (throttling and server errors, with jittered backoff); Hangar retries nothing by hand.
package awscfg

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
)

// MaxAttempts is how many times one request is tried: SDK's default of 3 lets a short burst of
// throttling fail a workflow step (three throttled attempts in a row at 10 % throttling happen
// about once in a thousand requests, and a provision makes dozens); 8 rides out bursts while every
// wait stays bounded by the caller's context.
const MaxAttempts = 8

// Load reads the configuration from the environment with Hangar's retry policy.
func Load(ctx context.Context, opts ...func(*config.LoadOptions) error) (aws.Config, error) {
	cfg, err := config.LoadDefaultConfig(ctx, append([]func(*config.LoadOptions) error{
		config.WithRetryMode(aws.RetryModeStandard), config.WithRetryMaxAttempts(MaxAttempts)}, opts...)...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load the AWS configuration: %w", err)
	}
	return cfg, nil
}
