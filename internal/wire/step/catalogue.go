package step

// Input is one input of the action, as the steps read it: its name in action.yml, its default
// (the same in action.yml, checked by a test) and what it means.
type Input struct {
	Name, Default, Usage string
}

// The action's inputs that a step binary reads. action.yml declares each of these with the same
// name and default, and maps it to HANGAR_<NAME> for the step; mode, version and release-url
// are read by scripts/action.sh alone (it chooses and fetches the binary).
var (
	InStack       = Input{"stack", "hangar", "the Hangar stack's name"}
	InGitHubToken = Input{"github-token", "", "a GitHub App installation token or PAT with admin rights on the repository or organisation (required for provision and release)"}
	InRunnerScope = Input{"runner-scope", "repo", "where runners are registered: the repository (repo) or the organisation (org)"}

	InPool                 = Input{"pool", "", "the pool to take instances from (required)"}
	InInstanceCount        = Input{"instance-count", "1", "how many instances (1 to 100)"}
	InUsageClass           = Input{"usage-class", "", "spot, on-demand or spot-fallback (default: the pool's)"}
	InAllowedInstanceTypes = Input{"allowed-instance-types", "", "instance type patterns, such as c* or m7g.* (default: any of the pool's)"}
	InMinVCPU              = Input{"min-vcpu", "0", "minimum vCPUs"}
	InMinMemoryMiB         = Input{"min-memory-mib", "0", "minimum memory in MiB"}
	InMaxRuntime           = Input{"max-runtime", "", "how long the instances may serve the run, such as 2h (default: the pool's)"}
	InRegistrationTimeout  = Input{"registration-timeout", "5m", "how long to wait for every runner to register"}
	InRunnerGroup          = Input{"runner-group", "", "the organisation runner group runners join (org scope; default: the pool's runnerGroup)"}
	InLabels               = Input{"labels", "", "extra runner labels, comma-separated; each runner carries <run id>-<label>"}
	InTags                 = Input{"tags", "", "extra instance tags: key=value, comma-separated (hangar:* is reserved)"}

	InDeregisterTimeout = Input{"deregister-timeout", "2m", "how long agents have to deregister before their instances are terminated"}

	InDryRun = Input{"dry-run", "false", "report what refresh would do, and change nothing: true or false"}
	InPools  = Input{"pools", "", "the pools to refresh, comma-separated (default: every pool of the stack)"}
)

// Each mode's inputs, in the order its -h lists them.
var (
	ProvisionInputs = []Input{InStack, InPool, InInstanceCount, InUsageClass, InAllowedInstanceTypes, InMinVCPU,
		InMinMemoryMiB, InMaxRuntime, InRegistrationTimeout, InRunnerScope, InRunnerGroup, InLabels, InTags, InGitHubToken}
	ReleaseInputs = []Input{InStack, InRunnerScope, InDeregisterTimeout, InGitHubToken}
	RefreshInputs = []Input{InStack, InDryRun, InPools}
)

// Each mode's outputs. A step sets outputs only through Output, with one of these names.
var (
	ProvisionOutputs = []string{"runner-label", "instance-ids", "reused", "created"}
	RefreshOutputs   = []string{"report"}
)
