package localenv

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// Eventually checks cond, with jittered backoff from 50 ms to 2 s, until it holds, it fails, or
// timeout passes; the error names what was awaited.
func Eventually(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	delay := 50 * time.Millisecond
	for {
		ok, err := cond(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			return fmt.Errorf("%s: %w", what, err)
		case ok:
			return nil
		}
		if err := wait.Sleep(ctx, wait.Jitter(delay)); err != nil {
			return fmt.Errorf("%s: not within %s", what, timeout)
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// Leaked returns the stack's EC2 instances that are pending or running without an item, or
// whose item says terminated: what nothing would ever end.
func (e *Env) Leaked(ctx context.Context) ([]string, error) {
	out, err := e.EC2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:" + fleet.TagStack), Values: []string{e.Stack}},
		{Name: aws.String("instance-state-name"), Values: []string{"pending", "running"}},
	}})
	if err != nil {
		return nil, err
	}
	var leaked []string
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			id := aws.ToString(in.InstanceId)
			it, err := e.Store.Get(ctx, id)
			if err != nil || it.State == state.Terminated {
				leaked = append(leaked, id)
			}
		}
	}
	return leaked, nil
}
