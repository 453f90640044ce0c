package offers

import (
	"context"
	"fmt"
	"path"
	"slices"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// MaxCount is the most instances one request may ask for.
const MaxCount = 100

// Usage classes a request may ask for, besides the instance usage classes spot and on-demand.
const (
	// UsageAny takes spot and on-demand instances alike.
	UsageAny = ""
)

// Request is what a run asks of a pool.
type Request struct {
	// Count is how many instances to claim (1..MaxCount).
	Count int
	// UsageClass is spot, on-demand, or UsageAny.
	UsageClass string
	// InstanceTypes are glob patterns (* and ?) over instance type names, such as "c*" or
	// "m7g.*"; an instance fits if it matches any. None means any type.
	InstanceTypes []string
	// MinVCPU and MinMemoryMiB are lower bounds; 0 means no bound.
	MinVCPU      int
	MinMemoryMiB int
	// Assign is what the instances are claimed for (a run, or label-routed jobs); Assign.Repo is
	// the repository they will serve, whose reuse scope decides which instances fit.
	Assign state.Assignment
	// Personalize, when set, completes a copy of Assign for one instance just before its claim
	// is written: for label-routed jobs, the job it gets and the runner made for it. A claim whose
	// assignment cannot be completed is not made.
	Personalize func(ctx context.Context, instanceID string, a *state.Assignment) error
	// Unused, when set, is told of each assignment Personalize completed whose claim was not won
	// (the instance had moved on), so that what was made for it can be undone.
	Unused func(instanceID string, a state.Assignment)
	// Considered, when set, is told of the instances about to be claimed, before their claims are
	// written: the pool reads their doorbells' owners meanwhile (doorbell.Bells.Expect), which
	// the hand-overs after the claims check.
	Considered func(instanceIDs ...string)
	// Home, when set, is how the claimed instances go back when the run ends, from the pool's
	// document in hand (pooldoc.Document.Home): written with each claim (state.Change.Home).
	Home *state.Home
	// Reuse is the pool's reuse scope: which instances that served other runs Assign.Repo may
	// be given (state.Reusable; "" is state.ReuseRepository).
	Reuse state.Reuse
	// AliveSince, when set, is the oldest heartbeat a running (idle) instance may have to be
	// claimed (state.Change.AliveSince). Stopped instances have no live agent and are exempt.
	AliveSince time.Time
	// ClaimDeadline is the threshold the claimed instances get.
	ClaimDeadline time.Time
	// Exclude lists instances not to claim (ones that already failed this request).
	Exclude []string
	// Given are offers the caller holds in hand and put on no queue (an instance just back in
	// the pool, for the job that has waited longest): claimed first, without a receive, when
	// they fit. The caller offers those not claimed.
	Given []Message
}

// home is the Home the claims write (none when the request gives none that says where to go
// back: a claim's Home is checked when it is written, state.Change.Validate).
func (r Request) home() *state.Home {
	if r.Home == nil || !r.Home.Known() {
		return nil
	}
	return r.Home
}

// Validate checks every field of the request.
func (r Request) Validate() error {
	if r.Count < 1 || r.Count > MaxCount {
		return fmt.Errorf("count %d: want 1 to %d", r.Count, MaxCount)
	}
	switch r.UsageClass {
	case UsageAny, state.UsageSpot, state.UsageOnDemand:
	default:
		return fmt.Errorf("usage class %q: want spot, on-demand, or empty for any", r.UsageClass)
	}
	for _, p := range r.InstanceTypes {
		if err := names.ValidateTypePattern(p); err != nil {
			return err
		}
	}
	if r.MinVCPU < 0 {
		return fmt.Errorf("minimum vCPU %d: want 0 or more", r.MinVCPU)
	}
	if r.MinMemoryMiB < 0 {
		return fmt.Errorf("minimum memory %d MiB: want 0 or more", r.MinMemoryMiB)
	}
	if r.Assign.RunID != "" || r.Personalize == nil {
		if err := names.ValidateAssignmentKey(r.Assign.RunID); err != nil {
			return err
		}
	}
	if r.ClaimDeadline.IsZero() {
		return fmt.Errorf("claim deadline is not set")
	}
	return nil
}

// Fits reports whether the instance a message offers satisfies the request.
func (r Request) Fits(m Message) bool {
	if slices.Contains(r.Exclude, m.InstanceID) {
		return false
	}
	if r.UsageClass != UsageAny && m.UsageClass != r.UsageClass {
		return false
	}
	if !state.Reusable(r.Reuse, m.Served, r.Assign.Repo) {
		return false
	}
	if m.VCPU < r.MinVCPU || m.MemoryMiB < r.MinMemoryMiB {
		return false
	}
	if len(r.InstanceTypes) == 0 {
		return true
	}
	for _, p := range r.InstanceTypes {
		if ok, _ := path.Match(p, m.InstanceType); ok {
			return true
		}
	}
	return false
}
