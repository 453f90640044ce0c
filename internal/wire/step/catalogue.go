package step

import (
	"strconv"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
	"github.com/hangar-ci/hangar/pkg/steps/release"
)

// Input is one input of the action, as the steps read it: its name in action.yml, its default
// (the same in action.yml, checked by a test) and what it means.
type Input struct {
	Name, Default, Usage string
}

// The action's inputs that a step binary reads. action.yml declares each of these with the same
// name and default (a test checks), and maps it to HANGAR_<NAME> for the step; mode, version and
// release-url are read by scripts/action.sh alone (it chooses and fetches the binary). A default
// is the owning package's constant; an empty or zero default means "not set": the package's own
// choice, or the pool's.
var (
	InStack       = Input{"stack", names.DefaultStack, "the Hangar stack's name"}
	InGitHubToken = Input{"github-token", "", "a GitHub App installation token or PAT with admin rights on the repository or organisation (required for provision and release)"}
	InRunnerScope = Input{"runner-scope", ghapi.ScopeRepo, "where runners are registered: the repository (repo) or the organisation (org)"}

	InPool                 = Input{"pool", "", "the pool to take instances from (required)"}
	InInstanceCount        = Input{"instance-count", strconv.Itoa(provision.DefaultCount), "how many instances (1 to 100)"}
	InUsageClass           = Input{"usage-class", "", "spot, on-demand or spot-fallback (default: the pool's)"}
	InAllowedInstanceTypes = Input{"allowed-instance-types", "", "instance type patterns, such as c* or m7g.* (default: any of the pool's)"}
	InMinVCPU              = Input{"min-vcpu", "0", "minimum vCPUs"}
	InMinMemoryMiB         = Input{"min-memory-mib", "0", "minimum memory in MiB"}
	InMaxRuntime           = Input{"max-runtime", "", "how long the instances may serve the run, such as 2h (default: the pool's)"}
	InRegistrationTimeout  = Input{"registration-timeout", FormatDuration(provision.DefaultRegistrationTimeout), "how long to wait for every runner to register"}
	InWaitForCapacity      = Input{"wait-for-capacity", strconv.FormatBool(false), "when the pool or the stack is at its maxInstances: wait for room until the registration timeout (true), or fail at once (false)"}
	InRunnerGroup          = Input{"runner-group", "", "the organisation runner group runners join (org scope; default: the pool's runnerGroup)"}
	InLabels               = Input{"labels", "", "extra runner labels, comma-separated; each runner carries <run id>-<label>"}
	InTags                 = Input{"tags", "", "extra instance tags: key=value, comma-separated (hangar:* is reserved)"}

	InDeregisterTimeout = Input{"deregister-timeout", FormatDuration(release.DefaultDeregisterTimeout), "how long agents have to deregister before their instances are terminated"}

	InDryRun = Input{"dry-run", strconv.FormatBool(false), "report what refresh would do, and change nothing: true or false"}
	InPools  = Input{"pools", "", "the pools to refresh, comma-separated (default: every pool of the stack)"}
)

// Each mode's inputs, in the order its -h lists them.
var (
	ProvisionInputs = []Input{InStack, InPool, InInstanceCount, InUsageClass, InAllowedInstanceTypes, InMinVCPU,
		InMinMemoryMiB, InMaxRuntime, InRegistrationTimeout, InWaitForCapacity, InRunnerScope, InRunnerGroup, InLabels, InTags, InGitHubToken}
	ReleaseInputs = []Input{InStack, InRunnerScope, InDeregisterTimeout, InGitHubToken}
	RefreshInputs = []Input{InStack, InDryRun, InPools}
)

// Each mode's outputs. A step sets outputs only through Output, with one of these names.
var (
	ProvisionOutputs = []string{"runner-label", "instance-ids", "reused", "created"}
	RefreshOutputs   = []string{"report"}
)

// FormatDuration writes d as a person would type it: 5m, not 5m0s; 1h30m, not 1h30m0s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
