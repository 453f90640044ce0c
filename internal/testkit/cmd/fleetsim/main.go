// Command fleetsim runs the fleet simulator (package fleetsim) until interrupted: every instance
// moto runs with the tag hangar:stack=<stack> gets a metadata mock and a real agent process.
//
//	fleetsim --stack demo [--dir .cache/fleet] [--agent-bin bin/agent] [--agent-args "--poll-interval 1s"]
//
// The emulators' endpoints come from the environment (make testbed-up writes them to
// .cache/testbed/endpoints.env); the agent is built from source when --agent-bin is not given.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/hangar-ci/hangar/internal/testkit/fleetsim"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
)

type options struct {
	stack, dir, agentBin, agentArgs, account string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var o options
	flag.StringVar(&o.stack, "stack", "", "simulate instances tagged hangar:stack=<stack> (required)")
	flag.StringVar(&o.dir, "dir", ".cache/fleet", "where each instance's runner, work directory and logs go")
	flag.StringVar(&o.agentBin, "agent-bin", "", "the agent binary (default: built from ./cmd/agent)")
	flag.StringVar(&o.agentArgs, "agent-args", "", "extra agent flags, space-separated")
	flag.StringVar(&o.account, "account", "123456789012", "the account in the identity documents")
	flag.Parse()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "fleetsim:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.stack == "" {
		return errors.New("--stack is required")
	}
	imds, ddb := os.Getenv("HANGAR_TESTBED_IMDS_BIN"), os.Getenv("AWS_ENDPOINT_URL_DYNAMODB")
	if imds == "" || ddb == "" {
		return errors.New("HANGAR_TESTBED_IMDS_BIN and AWS_ENDPOINT_URL_DYNAMODB are not set: run make testbed-up and load .cache/testbed/endpoints.env")
	}
	if o.agentBin == "" {
		var err error
		if o.agentBin, err = testbuild.Build("github.com/hangar-ci/hangar/cmd/agent"); err != nil {
			return err
		}
	}
	helper, err := testbuild.Build("github.com/hangar-ci/hangar/cmd/agent/runas")
	if err != nil {
		return err
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	sim, err := fleetsim.New(fleetsim.Config{
		Stack: o.stack, AgentBin: o.agentBin, HelperBin: helper, MetadataBin: imds, Dir: o.dir, Env: os.Environ(), DynamoDBEndpoint: ddb,
		Region: cfg.Region, Account: o.account, AgentArgs: strings.Fields(o.agentArgs),
		Log: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}, ec2.NewFromConfig(cfg))
	if err != nil {
		return err
	}
	return sim.Run(ctx)
}
