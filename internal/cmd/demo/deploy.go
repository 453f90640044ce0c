package main

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"text/template"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/hangar-ci/hangar/internal/testkit/emustack"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

//go:embed hangar.demo.yaml
var configText string

var configTemplate = template.Must(template.New("hangar.demo.yaml").Parse(configText))

// settings are what the demo changes between deployments.
type settings struct {
	Idle time.Duration
	Hot  int
}

// deployment is the demo's stack: its config, synthesized by the CDK app and deployed into the
// emulators.
type deployment struct {
	aws     aws.Config
	dir     string // config files and cloud assemblies
	app     string // the CDK app, built once
	infra   string // the CDK app's directory (its assets are under build/)
	stack   string
	server  string // the GitHub server the stack serves: the stand-in's URL
	subnets []pooldoc.Subnet
	vpc     string // the subnets' VPC
}

// newDeployment builds the CDK app, as a local world build (testbuild.Tags) so that the stack
// may pin the plain-http GitHub stand-in at server. Run from the repository's root (make demo is).
func newDeployment(ctx context.Context, stack, dir, server string) (*deployment, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("load AWS config: %w", err)
	}
	subnets, err := localenv.DefaultSubnets(ctx, ec2.NewFromConfig(cfg))
	if err != nil {
		return nil, err
	}
	vpc, err := localenv.DefaultVPC(ctx, ec2.NewFromConfig(cfg))
	if err != nil {
		return nil, err
	}
	infra, err := filepath.Abs("infra")
	if err != nil {
		return nil, err
	}
	d := &deployment{aws: cfg, dir: dir, app: filepath.Join(dir, "hangar-infra"), infra: infra, stack: stack, server: server, subnets: subnets, vpc: vpc}
	build := exec.CommandContext(ctx, "go", "build", "-tags", testbuild.Tags, "-o", d.app, ".")
	build.Dir = infra
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the CDK app: %w\n%s", err, out)
	}
	return d, nil
}

// deploy writes the config for s, synthesizes it and deploys it (creating or updating the stack).
func (d *deployment) deploy(ctx context.Context, s settings) (*emustack.Deployed, error) {
	var b bytes.Buffer
	if err := configTemplate.Execute(&b, map[string]any{"Stack": d.stack, "Repo": localenv.Repo, "Server": d.server, "Subnets": d.subnets, "VPC": d.vpc,
		"AMI": localenv.AMI, "Idle": s.Idle.String(), "Hot": s.Hot}); err != nil {
		return nil, fmt.Errorf("write the config: %w", err)
	}
	cfgPath := filepath.Join(d.dir, "hangar.yaml")
	if err := os.WriteFile(cfgPath, b.Bytes(), 0o644); err != nil {
		return nil, err
	}
	out := filepath.Join(d.dir, "cdk.out")
	if err := os.RemoveAll(out); err != nil {
		return nil, err
	}
	synth := exec.CommandContext(ctx, d.app)
	synth.Dir = d.infra
	synth.Env = append(os.Environ(), "HANGAR_CONFIG="+cfgPath, "CDK_OUTDIR="+out)
	if o, err := synth.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("synthesize the stack: %w\n%s", err, o)
	}
	return emustack.Deploy(ctx, d.aws, out, d.stack, emustack.Options{})
}

// remove deletes the stack.
func (d *deployment) remove() error { return emustack.Delete(context.Background(), d.aws, d.stack) }
