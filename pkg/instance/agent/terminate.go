package agent

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// watchdog terminates the instance once it is past its latest known deadline plus the grace,
// checking the clock every second. It needs nothing but memory: it works with DynamoDB down.
func (a *Agent) watchdog(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ms := a.deadline.Load()
		if ms == 0 || a.terminating.Load() {
			continue
		}
		deadline := time.UnixMilli(ms)
		if over := a.now().Sub(deadline); over > a.cfg.TerminateGrace {
			_ = a.terminate(ctx, fmt.Sprintf("past its deadline %s by %s", deadline.UTC().Format(time.RFC3339), over.Round(time.Second)))
			return
		}
	}
}

// terminate ends the instance by powering it off: the launch template makes a shutdown a
// termination, and it needs no permission, so the instance role holds none that could end
// another instance. Only if the shutdown command fails does it ask EC2 to terminate this instance
// (which works only where the deployer granted that). It returns ErrTerminated; only the first
// call acts.
func (a *Agent) terminate(ctx context.Context, reason string) error {
	if !a.terminating.CompareAndSwap(false, true) {
		return ErrTerminated
	}
	a.log.Warn("terminating this instance: powering off", "reason", reason, "command", a.cfg.ShutdownCommand)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, a.cfg.ShutdownCommand[0], a.cfg.ShutdownCommand[1:]...).CombinedOutput()
	if err == nil {
		return ErrTerminated
	}
	a.log.Error("power off failed; asking EC2 to terminate this instance", "error", err, "output", string(out))
	if _, err := a.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{a.cfg.Identity.InstanceID}}); err != nil {
		a.log.Error("EC2 would not terminate this instance either", "error", err)
	}
	return ErrTerminated
}
