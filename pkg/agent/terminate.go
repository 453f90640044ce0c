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

// terminate ends the instance: EC2 TerminateInstances on itself, or, if EC2 will not, the
// shutdown command (the launch template makes a shutdown a termination). It returns
// ErrTerminated; only the first call acts.
func (a *Agent) terminate(ctx context.Context, reason string) error {
	if !a.terminating.CompareAndSwap(false, true) {
		return ErrTerminated
	}
	a.log.Warn("terminating this instance", "reason", reason)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_, err := a.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{a.cfg.Identity.InstanceID}})
	if err == nil {
		return ErrTerminated
	}
	a.log.Error("EC2 would not terminate this instance; powering off instead", "error", err, "command", a.cfg.ShutdownCommand)
	out, err := exec.CommandContext(ctx, a.cfg.ShutdownCommand[0], a.cfg.ShutdownCommand[1:]...).CombinedOutput()
	if err != nil {
		a.log.Error("power off failed", "error", err, "output", string(out))
	}
	return ErrTerminated
}
