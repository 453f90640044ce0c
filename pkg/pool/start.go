package pool

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/hangar-ci/hangar/pkg/platform/awserr"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
)

// StartStopped starts claimed stopped instances (a provision's, or the dispatcher's). Refresh may
// have stopped one a moment ago, and EC2 refuses to start an instance that is still stopping:
// that is waited out, with jittered backoff, within ctx.
func (p *Pool) StartStopped(ctx context.Context, ids []string) error {
	backoff := wait.Backoff{Initial: time.Second, Max: 5 * time.Second, Clock: p.Clock}
	for {
		_, err := p.EC2.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: ids})
		if err == nil || !awserr.IsWrongState(err) {
			return err
		}
		if err := backoff.Sleep(ctx); err != nil {
			return fmt.Errorf("still stopping when the time ran out: %w", err)
		}
	}
}
