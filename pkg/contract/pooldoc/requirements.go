package pooldoc

import "fmt"

// Requirements choose a pool's instance types by size instead of by name: every current-
// generation type of the arch whose vCPU count and memory fall in the ranges, smallest first,
// at most MaxTypes of them. They are resolved against EC2 when a step or refresh loads the
// document (fleet.Launcher.Resolve), so new types join without a redeploy.
type Requirements struct {
	// Arch is x64 or arm64: the image's architecture.
	Arch      string `json:"arch"`
	VCPU      Range  `json:"vcpu"`
	MemoryMiB Range  `json:"memoryMiB"`
	// MaxTypes caps how many types the pool uses (default 10, at most 40): EC2 Fleet gets one
	// override per type and subnet.
	MaxTypes int `json:"maxTypes,omitempty"`
}

// Range is an inclusive range; Max 0 means no upper bound.
type Range struct {
	Min int `json:"min"`
	Max int `json:"max,omitempty"`
}

// Requirement bounds.
const (
	DefaultMaxTypes = 10
	maxMaxTypes     = 40
)

// Contains says whether v is in the range.
func (r Range) Contains(v int) bool { return v >= r.Min && (r.Max == 0 || v <= r.Max) }

// EC2Arch is the requirement's architecture as EC2 names it.
func (r *Requirements) EC2Arch() string {
	if r.Arch == "arm64" {
		return "arm64"
	}
	return "x86_64"
}

// Limit is MaxTypes with its default.
func (r *Requirements) Limit() int {
	if r.MaxTypes == 0 {
		return DefaultMaxTypes
	}
	return r.MaxTypes
}

// problems lists what is wrong with the requirements, each naming its field.
func (r *Requirements) problems() []string {
	var out []string
	if r.Arch != "x64" && r.Arch != "arm64" {
		out = append(out, fmt.Sprintf("instanceRequirements.arch: %q: want x64 or arm64 (the image's architecture)", r.Arch))
	}
	if r.VCPU.Min < 1 {
		out = append(out, fmt.Sprintf("instanceRequirements.vcpu.min: %d: want 1 or more", r.VCPU.Min))
	}
	if r.VCPU.Max != 0 && r.VCPU.Max < r.VCPU.Min {
		out = append(out, fmt.Sprintf("instanceRequirements.vcpu.max: %d: want 0 (no bound) or at least min (%d)", r.VCPU.Max, r.VCPU.Min))
	}
	if r.MemoryMiB.Min < 0 {
		out = append(out, fmt.Sprintf("instanceRequirements.memoryMiB.min: %d: want 0 or more", r.MemoryMiB.Min))
	}
	if r.MemoryMiB.Max != 0 && r.MemoryMiB.Max < r.MemoryMiB.Min {
		out = append(out, fmt.Sprintf("instanceRequirements.memoryMiB.max: %d: want 0 (no bound) or at least min (%d)", r.MemoryMiB.Max, r.MemoryMiB.Min))
	}
	if r.MaxTypes < 0 || r.MaxTypes > maxMaxTypes {
		out = append(out, fmt.Sprintf("instanceRequirements.maxTypes: %d: want 1 to %d (0: %d)", r.MaxTypes, maxMaxTypes, DefaultMaxTypes))
	}
	return out
}
