package offers

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"slices"
	"time"

	"github.com/hangar-ci/hangar/pkg/state"
)

// MaxCount is the most instances one request may ask for.
const MaxCount = 100

// Usage classes a request may ask for, besides the instance usage classes spot and on-demand.
const (
	// UsageAny takes spot and on-demand instances alike.
	UsageAny = ""
)

var typePatternRe = regexp.MustCompile(`^[a-z0-9.*?-]{1,64}$`)

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
	// Assign is the run the instances are claimed for; Assign.Repo is the run's repository.
	Assign state.Assignment
	// Token, when set, returns the registration token for one instance (sealed for it, by its
	// id: the caller builds the ARN from its own account, never from a message); Assign.RegToken
	// is then set per claim, and a claim whose token cannot be had is not made.
	Token func(ctx context.Context, instanceID string) (string, error)
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
}

// ValidateTypePattern checks one instance type pattern.
func ValidateTypePattern(p string) error {
	if !typePatternRe.MatchString(p) {
		return fmt.Errorf("instance type pattern %q is malformed: want 1 to 64 of a-z, 0-9, '.', '-', with '*' and '?' as wildcards (e.g. c*, m7g.*, c7i.large)", p)
	}
	return nil
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
		if err := ValidateTypePattern(p); err != nil {
			return err
		}
	}
	if r.MinVCPU < 0 {
		return fmt.Errorf("minimum vCPU %d: want 0 or more", r.MinVCPU)
	}
	if r.MinMemoryMiB < 0 {
		return fmt.Errorf("minimum memory %d MiB: want 0 or more", r.MinMemoryMiB)
	}
	if err := state.ValidateRunID(r.Assign.RunID); err != nil {
		return err
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
