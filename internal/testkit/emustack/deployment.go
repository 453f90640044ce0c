package emustack

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

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

//go:embed hangar.local.yaml
var configText string

var configTemplate = template.Must(template.New("hangar.local.yaml").Parse(configText))

// Settings are what a local world changes between deployments of its stack.
type Settings struct {
	Idle time.Duration
	Hot  int
	// AMI is the pool's image (default localenv.AMI, which the emulator serves).
	AMI string
}

// Deployment is a local world's stack (hangar.local.yaml: one pool serving both doors): its
// config, synthesized by the CDK app and deployed into the emulators, as make demo deploys it.
type Deployment struct {
	aws     aws.Config
	dir     string // config files and cloud assemblies
	app     string // the CDK app, built once
	infra   string // the CDK app's directory (its assets are under build/)
	stack   string
	server  string // the GitHub server the stack serves: the stand-in's URL
	subnets []pooldoc.Subnet
	vpc     string // the subnets' VPC
}

// NewDeployment builds the CDK app, as a local world build (testbuild.Tags) so that the stack
// may pin the plain-http GitHub stand-in at server; dir holds its configs and cloud assemblies.
func NewDeployment(ctx context.Context, stack, dir, server string) (*Deployment, error) {
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
	infra := filepath.Join(testbuild.ModuleRoot(), "infra")
	d := &Deployment{aws: cfg, dir: dir, app: filepath.Join(dir, "hangar-infra"), infra: infra, stack: stack, server: server, subnets: subnets, vpc: vpc}
	build := exec.CommandContext(ctx, "go", "build", "-tags", testbuild.Tags, "-o", d.app, ".")
	build.Dir = infra
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the CDK app: %w\n%s", err, out)
	}
	return d, nil
}

// Deploy writes the config for s, synthesizes it and deploys it (creating or updating the stack).
func (d *Deployment) Deploy(ctx context.Context, s Settings) (*Deployed, error) {
	out, err := d.synth(ctx, s)
	if err != nil {
		return nil, err
	}
	return Deploy(ctx, d.aws, out, d.stack, Options{})
}

// Synth writes the config for s and synthesizes it, as make synth does before a deploy, and
// returns the stack's template file.
func (d *Deployment) Synth(ctx context.Context, s Settings) (string, error) {
	out, err := d.synth(ctx, s)
	if err != nil {
		return "", err
	}
	return filepath.Join(out, d.stack+".template.json"), nil
}

// synth writes the config for s, synthesizes it and returns the cloud assembly's directory.
func (d *Deployment) synth(ctx context.Context, s Settings) (string, error) {
	if s.AMI == "" {
		s.AMI = localenv.AMI
	}
	var b bytes.Buffer
	if err := configTemplate.Execute(&b, map[string]any{"Stack": d.stack, "Repo": localenv.Repo, "Server": d.server, "Subnets": d.subnets, "VPC": d.vpc,
		"AMI": s.AMI, "Idle": s.Idle.String(), "Hot": s.Hot}); err != nil {
		return "", fmt.Errorf("write the config: %w", err)
	}
	cfgPath := filepath.Join(d.dir, "hangar.yaml")
	if err := os.WriteFile(cfgPath, b.Bytes(), 0o644); err != nil {
		return "", err
	}
	out := filepath.Join(d.dir, "cdk.out")
	if err := os.RemoveAll(out); err != nil {
		return "", err
	}
	synth := exec.CommandContext(ctx, d.app)
	synth.Dir = d.infra
	synth.Env = append(os.Environ(), "HANGAR_CONFIG="+cfgPath, "CDK_OUTDIR="+out)
	if o, err := synth.CombinedOutput(); err != nil {
		return "", fmt.Errorf("synthesize the stack: %w\n%s", err, o)
	}
	return out, nil
}

// Remove deletes the stack.
func (d *Deployment) Remove() error { return Delete(context.Background(), d.aws, d.stack) }
