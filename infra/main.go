// Command infra is the Hangar CDK app: it synthesizes the stack described by the config file
// (HANGAR_CONFIG, default hangar.yaml; see docs/configuration.md) from the binaries make synth
// builds into build/.
package main

import (
	"fmt"
	"os"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/hangar-ci/hangar/infra/config"
	"github.com/hangar-ci/hangar/infra/stack"
)

func main() {
	defer jsii.Close()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hangar infra:", err)
		os.Exit(1)
	}
}

func run() error {
	path := os.Getenv("HANGAR_CONFIG")
	if path == "" {
		path = "hangar.yaml"
	}
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	app := awscdk.NewApp(nil)
	env := &awscdk.Environment{Account: jsii.String(os.Getenv("CDK_DEFAULT_ACCOUNT")), Region: jsii.String(os.Getenv("CDK_DEFAULT_REGION"))}
	if *env.Account == "" || *env.Region == "" {
		env = nil // environment-agnostic: account and region resolve at deploy
	}
	if _, err := stack.New(app, cfg, stack.Assets{AgentDir: "build", RefreshDir: "build/refresh", WebhookDir: "build/webhook"}, &awscdk.StackProps{Env: env}); err != nil {
		return err
	}
	app.Synth(nil)
	return nil
}
