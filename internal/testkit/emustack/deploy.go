package emustack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	cfntypes "github.com/aws/aws-sdk-go-v2/service/cloudformation/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/hangar-ci/hangar/pkg/platform/wait"
)

// Options shape a deployment.
type Options struct {
	// Name is the CloudFormation stack's name (default: the artifact's).
	Name string
	// Parameters are the template's parameters to set.
	Parameters map[string]string
	// Timeout bounds the wait for the stack to settle (default 5 minutes).
	Timeout time.Duration
}

// Deployed is a stack as deployed.
type Deployed struct {
	Name    string
	Gaps    []Gap             // what the emulator could not take
	Outputs map[string]string // the stack's outputs
}

// Deploy deploys the stack artifact of the cloud assembly in dir into the emulator whose
// endpoints cfg names: it creates the stack, or updates it when it exists.
func Deploy(ctx context.Context, cfg aws.Config, dir, artifact string, o Options) (*Deployed, error) {
	if o.Name == "" {
		o.Name = artifact
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	id, err := sts.NewFromConfig(cfg).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		return nil, fmt.Errorf("deploy %s: who am I: %w", o.Name, err)
	}
	env := environment{partition: "aws", account: aws.ToString(id.Account), region: cfg.Region}
	raw, err := os.ReadFile(filepath.Join(dir, artifact+".template.json"))
	if err != nil {
		return nil, fmt.Errorf("deploy %s: %w", o.Name, err)
	}
	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
	m, err := readManifest(dir, artifact)
	if err != nil {
		return nil, fmt.Errorf("deploy %s: %w", o.Name, err)
	}
	if err := bootstrap(ctx, cfg, s3c, m, raw, env); err != nil {
		return nil, fmt.Errorf("deploy %s: bootstrap: %w", o.Name, err)
	}
	if err := uploadAssets(ctx, s3c, dir, m, env); err != nil {
		return nil, fmt.Errorf("deploy %s: %w", o.Name, err)
	}
	tpl, gaps, err := adapt(raw, env)
	if err != nil {
		return nil, fmt.Errorf("deploy %s: %w", o.Name, err)
	}
	// A retried create or update only says "already exists" or "in progress": one attempt.
	cfn := cloudformation.NewFromConfig(cfg, func(o *cloudformation.Options) { o.RetryMaxAttempts = 1 })
	var params []cfntypes.Parameter
	for k, v := range o.Parameters {
		params = append(params, cfntypes.Parameter{ParameterKey: aws.String(k), ParameterValue: aws.String(v)})
	}
	caps := []cfntypes.Capability{cfntypes.CapabilityCapabilityIam, cfntypes.CapabilityCapabilityNamedIam}
	exists, err := stackExists(ctx, cfn, o.Name)
	if err != nil {
		return nil, fmt.Errorf("deploy %s: %w", o.Name, err)
	}
	if exists {
		_, err = cfn.UpdateStack(ctx, &cloudformation.UpdateStackInput{StackName: aws.String(o.Name), TemplateBody: aws.String(string(tpl)),
			Capabilities: caps, Parameters: params})
		if err != nil && strings.Contains(err.Error(), "No updates are to be performed") {
			err = nil
		}
	} else {
		_, err = cfn.CreateStack(ctx, &cloudformation.CreateStackInput{StackName: aws.String(o.Name), TemplateBody: aws.String(string(tpl)),
			Capabilities: caps, Parameters: params})
	}
	if err != nil {
		return nil, fmt.Errorf("deploy %s: %w", o.Name, err)
	}
	st, err := settle(ctx, cfn, o.Name, o.Timeout)
	if err != nil {
		return nil, fmt.Errorf("deploy %s: %w", o.Name, err)
	}
	want := cfntypes.StackStatusCreateComplete
	if exists {
		want = cfntypes.StackStatusUpdateComplete
	}
	if st.StackStatus != want {
		return nil, fmt.Errorf("deploy %s: %s (%s)%s", o.Name, st.StackStatus, aws.ToString(st.StackStatusReason), failures(ctx, cfn, o.Name))
	}
	d := &Deployed{Name: o.Name, Gaps: gaps, Outputs: map[string]string{}}
	for _, out := range st.Outputs {
		d.Outputs[aws.ToString(out.OutputKey)] = aws.ToString(out.OutputValue)
	}
	return d, nil
}

// Delete deletes the stack and waits until it is gone.
func Delete(ctx context.Context, cfg aws.Config, name string) error {
	cfn := cloudformation.NewFromConfig(cfg)
	if _, err := cfn.DeleteStack(ctx, &cloudformation.DeleteStackInput{StackName: aws.String(name)}); err != nil {
		return fmt.Errorf("delete stack %s: %w", name, err)
	}
	st, err := settle(ctx, cfn, name, 2*time.Minute)
	if err != nil || st == nil {
		return err
	}
	if st.StackStatus != cfntypes.StackStatusDeleteComplete {
		return fmt.Errorf("delete stack %s: %s (%s)", name, st.StackStatus, aws.ToString(st.StackStatusReason))
	}
	return nil
}

// stackExists says whether a stack of that name is live (a deleted one is not).
func stackExists(ctx context.Context, cfn *cloudformation.Client, name string) (bool, error) {
	out, err := cfn.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(name)})
	if err != nil {
		if isMissing(err) {
			return false, nil
		}
		return false, fmt.Errorf("describe stack: %w", err)
	}
	return len(out.Stacks) > 0 && out.Stacks[0].StackStatus != cfntypes.StackStatusDeleteComplete, nil
}

// isMissing says whether err is CloudFormation's answer about a stack that does not exist (a
// ValidationError, told apart only by its message).
func isMissing(err error) bool {
	return err != nil && strings.Contains(err.Error(), "does not exist")
}

// settle waits until the stack is in no _IN_PROGRESS state and returns it (nil: gone).
func settle(ctx context.Context, cfn *cloudformation.Client, name string, timeout time.Duration) (*cfntypes.Stack, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		out, err := cfn.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(name)})
		switch {
		case isMissing(err):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("wait for the stack to settle: %w", err)
		case len(out.Stacks) == 0:
			return nil, nil
		case !strings.HasSuffix(string(out.Stacks[0].StackStatus), "_IN_PROGRESS"):
			return &out.Stacks[0], nil
		}
		if err := wait.Sleep(ctx, wait.Jitter(delay)); err != nil {
			return nil, fmt.Errorf("wait for the stack to settle (%s, last %s): %w", timeout, out.Stacks[0].StackStatus, err)
		}
	}
}

// failures lists the stack's failed resources, for an error message.
func failures(ctx context.Context, cfn *cloudformation.Client, name string) string {
	ev, err := cfn.DescribeStackEvents(ctx, &cloudformation.DescribeStackEventsInput{StackName: aws.String(name)})
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, e := range ev.StackEvents {
		if strings.HasSuffix(string(e.ResourceStatus), "FAILED") {
			fmt.Fprintf(&b, "\n  %s %s: %s", aws.ToString(e.ResourceType), aws.ToString(e.LogicalResourceId), aws.ToString(e.ResourceStatusReason))
		}
	}
	return b.String()
}
