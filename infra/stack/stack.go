package stack

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3assets"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/hangar-ci/hangar/infra/config"
)

// Assets are the built binaries the stack ships.
type Assets struct {
	// AgentDir holds agent-linux-amd64 and agent-linux-arm64, and the agent's helper,
	// hangar-runas-linux-amd64 and hangar-runas-linux-arm64 (cmd/agent/runas).
	AgentDir string
	// RefreshDir holds the refresh function's bootstrap (linux/arm64).
	RefreshDir string
	// WebhookDir holds the label-routed jobs' functions' bootstrap (cmd/webhook, linux/arm64);
	// needed only when some pool has jobs.
	WebhookDir string
}

// agent is one architecture's agent binary and its helper, each uploaded as an asset.
type agent struct {
	asset, helper        awss3assets.Asset
	sha256, helperSHA256 string
}

// hangar is the stack under construction.
type hangar struct {
	stack  awscdk.Stack
	cfg    *config.Config
	agents map[string]agent // by arch: x64, arm64
	table  *table
	pools  []*pool
	roles  *roles
	jobs   *jobs // nil when no pool serves label-routed jobs
}

// New adds the Hangar stack described by cfg to scope.
func New(scope constructs.Construct, cfg *config.Config, assets Assets, props *awscdk.StackProps) (awscdk.Stack, error) {
	h := &hangar{cfg: cfg, agents: map[string]agent{}}
	h.stack = awscdk.NewStack(scope, jsii.String(cfg.Stack), props)
	awscdk.Tags_Of(h.stack).Add(jsii.String("hangar:stack"), jsii.String(cfg.Stack), nil)
	goarch := map[string]string{"x64": "amd64", "arm64": "arm64"}
	for _, arch := range slices.Sorted(maps.Keys(goarch)) { // in order: the same config, the same cloud assembly
		var ag agent
		for _, b := range []struct {
			name, id string
			asset    *awss3assets.Asset
			sum      *string
		}{{"agent", "Agent-", &ag.asset, &ag.sha256}, {"hangar-runas", "AgentHelper-", &ag.helper, &ag.helperSHA256}} {
			path := filepath.Join(assets.AgentDir, b.name+"-linux-"+goarch[arch])
			sum, err := fileSHA256(path)
			if err != nil {
				return nil, fmt.Errorf("%s build for %s: %w (make synth builds it)", b.name, arch, err)
			}
			*b.sum = sum
			*b.asset = awss3assets.NewAsset(h.stack, jsii.String(b.id+arch), &awss3assets.AssetProps{Path: jsii.String(path)})
		}
		h.agents[arch] = ag
	}
	if _, err := os.Stat(filepath.Join(assets.RefreshDir, "bootstrap")); err != nil {
		return nil, fmt.Errorf("refresh function build: %w (make synth builds it)", err)
	}
	if cfg.ServesJobs() {
		if _, err := os.Stat(filepath.Join(assets.WebhookDir, "bootstrap")); err != nil {
			return nil, fmt.Errorf("webhook function build (pools have jobs): %w (make synth builds it)", err)
		}
	}
	h.table = newTable(h.stack, cfg.Stack)
	h.roles = newRoles(h)
	if cfg.ServesJobs() {
		h.jobs = newJobs(h, assets.WebhookDir) // before the pools: their documents name the returns queue
	}
	for i := range cfg.Pools {
		p, err := newPool(h, &cfg.Pools[i])
		if err != nil {
			return nil, err
		}
		h.pools = append(h.pools, p)
	}
	h.roles.grant(h)
	newMonitoring(h, newRefresh(h, assets.RefreshDir))
	awscdk.NewCfnOutput(h.stack, jsii.String("WorkflowRoleArn"), &awscdk.CfnOutputProps{
		Value: h.roles.workflow.RoleArn(), Description: jsii.String("role-to-assume for aws-actions/configure-aws-credentials in workflows that use Hangar"),
	})
	awscdk.NewCfnOutput(h.stack, jsii.String("TableName"), &awscdk.CfnOutputProps{Value: h.table.t.TableName()})
	return h.stack, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// arn builds an ARN of this stack's account and region.
func (h *hangar) arn(service, resource string) *string {
	return awscdk.Fn_Join(jsii.String(""), &[]*string{jsii.String("arn:"), h.stack.Partition(), jsii.String(":" + service + ":"),
		h.stack.Region(), jsii.String(":"), h.stack.Account(), jsii.String(":" + resource)})
}
