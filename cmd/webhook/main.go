// Command webhook is the bootstrap of the two Lambda functions that serve label-routed jobs
// (docs/labels.md). HANGAR_WEBHOOK_ROLE says which it is:
//
//   - ingress: behind the stack's Function URL (no AWS authentication: the delivery's
//     X-Hub-Signature-256 is the gate), it takes the GitHub App's workflow_job webhooks and puts
//     the stack's jobs on the jobs queue (package webhook);
//   - dispatch: fed by the jobs queue and the returns queue in batches, it places jobs on
//     instances with just-in-time runners and takes the instances back (package dispatch).
//
// The two are apart so that each role holds only its own secret: the webhook secret for
// ingress, the App's private key for dispatch. Both are wired once, before the first event.
package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hangar-ci/hangar/internal/wire/awscfg"
	"github.com/hangar-ci/hangar/internal/wire/jobswire"
	"github.com/hangar-ci/hangar/pkg/labels/dispatch"
	"github.com/hangar-ci/hangar/pkg/labels/webhook"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if os.Getenv("AWS_LAMBDA_RUNTIME_API") == "" {
		fmt.Fprintln(os.Stderr, "webhook: this is a Lambda function's bootstrap (HANGAR_WEBHOOK_ROLE=ingress or dispatch); the stack deploys it (docs/labels.md)")
		os.Exit(2)
	}
	handler, err := wire(context.Background(), log)
	if err != nil {
		log.Error("init the function", "error", err)
		os.Exit(1)
	}
	lambda.Start(handler)
}

// wire builds the role's handler from the environment.
func wire(ctx context.Context, log *slog.Logger) (any, error) {
	env, err := jobswire.EnvFrom(os.Getenv)
	if err != nil {
		return nil, err
	}
	cfg, err := awscfg.Load(ctx)
	if err != nil {
		return nil, err
	}
	o := jobswire.Options{Log: log, Metrics: os.Stdout}
	if env.Role == jobswire.RoleIngress {
		h, err := jobswire.Ingress(cfg, env, o)
		if err != nil {
			return nil, err
		}
		return urlHandler(h), nil
	}
	d, _, err := jobswire.Dispatcher(ctx, cfg, env, o)
	if err != nil {
		return nil, err
	}
	return sqsHandler(d, env.ReturnsQueueARN), nil
}

// urlHandler adapts a Function URL's events to the webhook handler.
func urlHandler(h *webhook.Handler) func(context.Context, events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
	return func(ctx context.Context, e events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
		body, bad := urlBody(e)
		if bad != "" { // answered, not the function's failure
			return events.LambdaFunctionURLResponse{StatusCode: http.StatusBadRequest, Body: bad}, nil
		}
		headers := http.Header{}
		for k, v := range e.Headers {
			headers.Set(k, v)
		}
		resp := h.Handle(ctx, webhook.Request{Method: e.RequestContext.HTTP.Method, Headers: headers, Body: body})
		return events.LambdaFunctionURLResponse{StatusCode: resp.Status, Body: resp.Body,
			Headers: map[string]string{"Content-Type": "text/plain; charset=utf-8"}}, nil
	}
}

// sqsHandler adapts SQS batches (the jobs queue's and the returns queue's event source mappings,
// with partial batch responses) to the dispatcher.
func sqsHandler(d *dispatch.Dispatcher, returnsARN string) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	return func(ctx context.Context, e events.SQSEvent) (events.SQSEventResponse, error) {
		batch := make([]dispatch.Message, len(e.Records))
		for i, r := range e.Records {
			source := dispatch.FromJobs
			if r.EventSourceARN == returnsARN {
				source = dispatch.FromReturns
			}
			receives, _ := strconv.Atoi(r.Attributes["ApproximateReceiveCount"])
			batch[i] = dispatch.Message{ID: r.MessageId, Body: r.Body, Source: source, Receives: receives}
		}
		var resp events.SQSEventResponse
		for _, id := range d.Handle(ctx, batch) {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
		}
		return resp, nil
	}
}

// urlBody returns a Function URL event's body, decoded when the URL base64-encoded it, or the
// answer to give when it cannot be.
func urlBody(e events.LambdaFunctionURLRequest) ([]byte, string) {
	if !e.IsBase64Encoded {
		return []byte(e.Body), ""
	}
	b, err := base64.StdEncoding.DecodeString(e.Body)
	if err != nil {
		return nil, "body: not base64: " + err.Error() + "\n"
	}
	return b, ""
}
