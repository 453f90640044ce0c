package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// InstanceReport is one instance as its item holds it: where it stands, the run it serves or
// served last, its agent's latest signal with the log tail the agent sent, and why it ended.
type InstanceReport struct {
	ID         string    `json:"instanceId"`
	Pool       string    `json:"pool"`
	State      string    `json:"state"`
	Version    int64     `json:"version"`
	Reason     string    `json:"reason,omitempty"`
	Type       string    `json:"instanceType,omitempty"`
	UsageClass string    `json:"usageClass,omitempty"`
	AZ         string    `json:"az,omitempty"`
	SpecHash   string    `json:"specHash,omitempty"`
	OnSpec     bool      `json:"onCurrentSpec"`
	LaunchedAt time.Time `json:"launchedAt,omitzero"`
	UpdatedAt  time.Time `json:"updatedAt,omitzero"`
	// Deadline is the state's threshold: past it, refresh acts (zero once terminated).
	Deadline time.Time `json:"deadline,omitzero"`
	// Run and Repository are the run the instance serves now ("" when none); LastRun the one
	// it served before.
	Run        string   `json:"run,omitempty"`
	RunAttempt int      `json:"runAttempt,omitempty"`
	Repository string   `json:"repository,omitempty"`
	LastRun    string   `json:"lastRun,omitempty"`
	Served     []string `json:"servedRepositories,omitempty"`
	// Signal is the agent's latest signal: its name, the run and item version it is about, when
	// it was sent, and the log tail it carried (a failed registration's or pre-runner script's).
	Signal        string    `json:"signal,omitempty"`
	SignalRun     string    `json:"signalRun,omitempty"`
	SignalVersion int64     `json:"signalVersion,omitempty"`
	SignalAt      time.Time `json:"signalAt,omitzero"`
	LogTail       string    `json:"logTail,omitempty"`
	HeartbeatAt   time.Time `json:"heartbeatAt,omitzero"`
	AgentVersion  string    `json:"agentVersion,omitempty"`
	// RegisterFailures counts runs in a row whose runner failed to register.
	RegisterFailures int `json:"registerFailures,omitempty"`
	// Ended says why a terminated instance ended ("" while it lives).
	Ended string `json:"ended,omitempty"`
	// Events are the item's moments, oldest first.
	Events []Event `json:"events"`
}

// Event is one moment of an instance's item.
type Event struct {
	At   time.Time `json:"at"`
	What string    `json:"what"`
}

// Instance reads one instance's item. A malformed id, or one the stack's table does not hold
// CheckInstanceID refuses a malformed instance id, before anything is read.
func CheckInstanceID(id string) error {
	if err := names.ValidateInstanceID(id); err != nil {
		return fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	return nil
}

// (never launched by the stack, or terminated longer ago than items are kept), is bad input.
func (i *Operator) Instance(ctx context.Context, id string) (*InstanceReport, error) {
	if err := CheckInstanceID(id); err != nil {
		return nil, err
	}
	in, err := i.d.Store.Get(ctx, id)
	if errors.Is(err, state.ErrNotFound) {
		return nil, unknown{fmt.Errorf("%w: instance %s: not in stack %s's table (an instance the stack launched is kept %s after it ends): want the id of one of its instances",
			ErrBadInput, id, i.d.Stack.Name, days(i.d.Stack.HistoryRetention()))}
	}
	if err != nil {
		return nil, fmt.Errorf("read instance %s: %w", id, err)
	}
	return i.report(in), nil
}

func (i *Operator) report(in *state.Instance) *InstanceReport {
	r := &InstanceReport{ID: in.ID, Pool: in.Pool, State: string(in.State), Version: in.Version, Reason: in.StateReason,
		Type: in.InstanceType, UsageClass: in.UsageClass, AZ: in.AZ, SpecHash: in.SpecHash,
		LaunchedAt: in.LaunchedAt, UpdatedAt: in.UpdatedAt, Deadline: in.Threshold,
		Run: in.RunID, RunAttempt: in.RunAttempt, Repository: in.Repo, LastRun: in.LastRunID, Served: in.ServedRepos,
		Signal: string(in.Signal), SignalRun: in.SignalRun, SignalVersion: in.SignalVersion, SignalAt: in.SignalAt,
		LogTail: in.SignalLog, HeartbeatAt: in.HeartbeatAt, AgentVersion: in.AgentVersion, RegisterFailures: in.RegisterFailures}
	if doc := i.d.Stack.Pool(in.Pool); doc != nil {
		r.OnSpec = in.SpecHash != "" && in.SpecHash == doc.SpecHash
	}
	if in.State == state.Terminated {
		r.Ended = in.StateReason
		if (in.Signal == state.SignalSpotInterrupted || in.Signal == state.SignalFailed) && !strings.Contains(in.StateReason, string(in.Signal)) {
			r.Ended = fmt.Sprintf("%s (its agent signalled %s)", in.StateReason, in.Signal)
		}
	}
	add := func(at time.Time, what string) {
		if !at.IsZero() {
			r.Events = append(r.Events, Event{At: at, What: what})
		}
	}
	add(in.LaunchedAt, "launched")
	if in.Signal != "" {
		what := "agent signalled " + string(in.Signal)
		if in.SignalRun != "" {
			what += " for run " + in.SignalRun
		}
		add(in.SignalAt, what)
	}
	add(in.HeartbeatAt, "agent's last heartbeat")
	what := "became " + string(in.State)
	if in.StateReason != "" {
		what += ": " + in.StateReason
	}
	add(in.UpdatedAt, what)
	slices.SortStableFunc(r.Events, func(a, b Event) int { return a.At.Compare(b.At) })
	return r
}
