package offers

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// MessageVersion is the schema version of Message.
const MessageVersion = 1

// Message describes one idle or stopped instance waiting in a pool (docs/design.md §8).
type Message struct {
	V            int    `json:"v"`
	InstanceARN  string `json:"instanceArn"`
	InstanceID   string `json:"instanceId"`
	Pool         string `json:"pool"`
	InstanceType string `json:"instanceType"`
	UsageClass   string `json:"usageClass"`
	VCPU         int    `json:"vcpu"`
	MemoryMiB    int    `json:"memoryMiB"`
	AZ           string `json:"az"`
	SpecHash     string `json:"specHash,omitempty"`
	// Version is the item version when the message was published; the claim is conditional on it.
	Version int64 `json:"version"`
	// Stopped says the instance is stopped and must be started after the claim.
	Stopped bool `json:"stopped,omitempty"`
	// IdleDeadline is the item's threshold (Unix ms); past it the message is stale.
	IdleDeadline int64 `json:"idleDeadline"`
	// Served lists the repositories the instance has served (none when fresh), so that a
	// selector skips offers the pool's reuse scope keeps from its run without a write.
	Served []string `json:"served,omitempty"`
	// RegisterMs is the item's regMs: how long its agent took to register last time, which
	// provision waits before its first read of a claim (design §6).
	RegisterMs int64 `json:"regMs,omitempty"`
}

// MessageFor returns the message that offers instance in to its pool. The instance must be idle
// or stopped.
func MessageFor(in *state.Instance) (Message, error) {
	if in.State != state.Idle && in.State != state.Stopped {
		return Message{}, fmt.Errorf("instance %s is %s: only idle or stopped instances go into a pool", in.ID, in.State)
	}
	if in.RunID != "" {
		return Message{}, fmt.Errorf("instance %s still holds run %s: it cannot go into a pool", in.ID, in.RunID)
	}
	return Message{
		V: MessageVersion, InstanceARN: in.ARN, InstanceID: in.ID, Pool: in.Pool,
		InstanceType: in.InstanceType, UsageClass: in.UsageClass, VCPU: in.VCPU, MemoryMiB: in.MemoryMiB,
		AZ: in.AZ, SpecHash: in.SpecHash, Version: in.Version, Stopped: in.State == state.Stopped,
		IdleDeadline: in.Threshold.UnixMilli(), Served: in.ServedRepos, RegisterMs: in.RegisterMs,
	}, nil
}

// Instance is the item as the message offers it: the fields the message carries, nothing
// else (no bell, no history). A claim written in a batch returns this with the claim applied.
func (m Message) Instance() state.Instance {
	in := state.Instance{ID: m.InstanceID, ARN: m.InstanceARN, Pool: m.Pool, State: m.State(), Version: m.Version,
		Threshold: m.Deadline(), ServedRepos: slices.Clone(m.Served)}
	in.InstanceType, in.UsageClass, in.VCPU, in.MemoryMiB, in.AZ = m.InstanceType, m.UsageClass, m.VCPU, m.MemoryMiB, m.AZ
	in.SpecHash, in.RegisterMs = m.SpecHash, m.RegisterMs
	return in
}

// Deadline returns IdleDeadline as a time.
func (m Message) Deadline() time.Time { return time.UnixMilli(m.IdleDeadline) }

// State returns the state the message offers the instance in.
func (m Message) State() state.State {
	if m.Stopped {
		return state.Stopped
	}
	return state.Idle
}

// ErrPoison is matched by every error of ParseMessage: the message can never be used.
var ErrPoison = errors.New("poison pool message")

// ParseMessage decodes and checks a message body received from pool's queue. Any error matches
// ErrPoison.
func ParseMessage(body, pool string) (Message, error) {
	var m Message
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		return Message{}, fmt.Errorf("%w: not JSON: %w", ErrPoison, err)
	}
	if err := m.validate(pool); err != nil {
		return Message{}, fmt.Errorf("%w: %w", ErrPoison, err)
	}
	return m, nil
}

func (m Message) validate(pool string) error {
	switch {
	case m.V != MessageVersion:
		return fmt.Errorf("schema version %d: want %d", m.V, MessageVersion)
	case m.Pool != pool:
		return fmt.Errorf("pool %q on the queue of pool %q", m.Pool, pool)
	case m.Version < 1:
		return fmt.Errorf("version %d: want 1 or more", m.Version)
	case m.IdleDeadline <= 0:
		return fmt.Errorf("idleDeadline %d: want Unix milliseconds", m.IdleDeadline)
	case m.InstanceType == "":
		return errors.New("instanceType is empty")
	case m.UsageClass != state.UsageSpot && m.UsageClass != state.UsageOnDemand:
		return fmt.Errorf("usageClass %q: want spot or on-demand", m.UsageClass)
	case m.VCPU < 0 || m.MemoryMiB < 0:
		return fmt.Errorf("vcpu %d, memoryMiB %d: want 0 or more", m.VCPU, m.MemoryMiB)
	case m.RegisterMs < 0:
		return fmt.Errorf("regMs %d: want 0 or more milliseconds", m.RegisterMs)
	}
	if err := names.ValidateInstanceID(m.InstanceID); err != nil {
		return err
	}
	id, err := state.InstanceIDFromARN(m.InstanceARN)
	if err != nil {
		return err
	}
	if id != m.InstanceID {
		return fmt.Errorf("instanceArn %q names another instance than instanceId %q", m.InstanceARN, m.InstanceID)
	}
	return nil
}
