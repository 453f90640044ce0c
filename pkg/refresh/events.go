package refresh

import (
	"context"
	"errors"
	"fmt"

	"github.com/hangar-ci/hangar/pkg/state"
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
	if err := state.ValidateInstanceID(id); err != nil {
		return nil, err
	}
	for range 3 {
		in, err := d.Store.Get(ctx, id)
		if errors.Is(err, state.ErrNotFound) {
			return nil, nil // not Hangar's
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", id, err)
		}
		if in.State == state.Terminated {
			return nil, nil
		}
		_, err = d.Store.Transition(ctx, state.Change{InstanceID: id, Pool: in.Pool, From: in.State, To: state.Terminated,
			Version: in.Version, RunID: in.RunID, Reason: reason})
		if err == nil {
			return &Action{Instance: id, Pool: in.Pool, Do: "terminate", Reason: reason}, nil
		}
		if !errors.Is(err, state.ErrConflict) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("mark %s terminated: its item kept changing", id)
}
