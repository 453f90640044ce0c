package refresh

import (
	"context"
)

// Interrupted handles an EC2 spot interruption warning for instance id: its item is marked
// terminated at once (its pool message becomes stale, and its agent, seeing the item, stops);
// AWS reclaims the machine. An instance Hangar does not know is ignored.
func Interrupted(ctx context.Context, d Deps, id string) (*Action, error) {
	return markTerminated(ctx, d, id, "spot interruption warning")
}

// StateChanged handles an EC2 state-change notification: an instance that is terminated, or
// shutting down, outside Hangar's doing has its item marked terminated.
func StateChanged(ctx context.Context, d Deps, id, ec2State string) (*Action, error) {
	switch ec2State {
	case "shutting-down", "terminated":
		return markTerminated(ctx, d, id, "EC2 reports it "+ec2State)
	}
	return nil, nil
}

func markTerminated(ctx context.Context, d Deps, id, reason string) (*Action, error) {
	in, err := d.Pool.MarkTerminated(ctx, id, reason)
	if err != nil || in == nil {
		return nil, err
	}
	return &Action{Instance: id, Pool: in.Pool, Do: "terminate", Reason: reason}, nil
}
