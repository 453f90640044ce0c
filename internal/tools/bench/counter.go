package main

import (
	"context"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/smithy-go/middleware"
)

// counter counts the requests the SDK sends: every AWS API call attempt, retries included (the
// Deserialize step runs once per attempt).
type counter struct{ n atomic.Int64 }

func (c *counter) add(stack *middleware.Stack) error {
	return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("hangarBenchCount",
		func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
			c.n.Add(1)
			return next.HandleDeserialize(ctx, in)
		}), middleware.After)
}

// awsConfig loads the SDK configuration from the environment, counting requests in c.
func awsConfig(ctx context.Context, c *counter) (aws.Config, error) {
	return config.LoadDefaultConfig(ctx, config.WithAPIOptions([]func(*middleware.Stack) error{c.add}))
}
