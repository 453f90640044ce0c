package pooldoc

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// SchemaVersion is the version of Document this code reads; a document of another version is
// refused, naming both.
const SchemaVersion = 2

// Markets a pool may launch in.
const (
	MarketSpot         = "spot"
	MarketOnDemand     = "on-demand"
	MarketSpotFallback = "spot-fallback" // spot first, on-demand for what spot cannot give
)

// Allocation strategies.
const (
	AllocationCost     = "cost"     // on-demand lowest-price, spot price-capacity-optimized
	AllocationPriority = "priority" // on-demand prioritized, spot capacity-optimized-prioritized
)

// Document is one pool's published configuration.
type Document struct {
	SchemaVersion int    `json:"schemaVersion"`
	Name          string `json:"name"`
	Partition     string `json:"partition"`
	Region        string `json:"region"`
	Account       string `json:"account"`
	Table         string `json:"table"`
	QueueURL      string `json:"queueUrl"`
	// GitHubURL is the GitHub server the pool serves (default https://github.com; an enterprise
	// server's https://<host>): provision refuses a workflow of another server and writes runner
	// URLs on this one, and the agent sends a registration token to no other server. Workflows
	// cannot change it (docs/security.md, "The control plane").
	GitHubURL          string         `json:"githubUrl,omitempty"`
	DeadLetterQueueURL string         `json:"deadLetterQueueUrl,omitempty"`
	LaunchTemplate     LaunchTemplate `json:"launchTemplate"`
	SpecHash           string         `json:"specHash"`
	// InstanceTypes are the pool's types in preference order; with InstanceRequirements (and
	// no types) provision and refresh fill them in from EC2 before using the pool
	// (ChoosesTypesBySize, fleet.Launcher.Resolve).
	InstanceTypes        []string      `json:"instanceTypes,omitempty"`
	InstanceRequirements *Requirements `json:"instanceRequirements,omitempty"`
	Subnets              []Subnet      `json:"subnets"`
	Market               string        `json:"market"`
	AllocationStrategy   string        `json:"allocationStrategy,omitempty"`
	Labels               []string      `json:"labels,omitempty"`
	AllowedRepositories  []string      `json:"allowedRepositories,omitempty"`
	// Reuse says which runs may follow one another on an instance: repository (the default),
	// owner, any, or never (one run per instance). See docs/security.md.
	Reuse state.Reuse `json:"reuse,omitempty"`
	// RunnerGroup is the organisation runner group runners join with org scope.
	RunnerGroup string            `json:"runnerGroup,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
	Timeouts    Timeouts          `json:"timeouts"`
	Warm        Warm              `json:"warm"`
	Runner      Runner            `json:"runner"`
	// MaxInstances bounds the pool's live instances, whatever launches them (a run, a
	// label-routed job, a warm-pool fill); 0: no bound but the stack's and the account's quotas.
	MaxInstances int `json:"maxInstances,omitempty"`
	// StackCap bounds the live instances of all the stack's pools together; nil: no bound.
	StackCap *StackCap `json:"stackCap,omitempty"`
	// Jobs makes the pool serve label-routed jobs (docs/labels.md); nil: steps only.
	Jobs *Jobs `json:"jobs,omitempty"`
	// Drained closes the pool to reuse (hangar drain): nothing of it is claimed or offered, its
	// idle and warm instances are retired, those serving runs are retired when their runs end,
	// and runs get new instances. A deploy writes the document without it, which undrains.
	Drained bool `json:"drained,omitempty"`
	// ReturnsQueueURL is the stack's returns queue, where an agent says it has finished a
	// label-routed job (empty: the stack serves no label-routed jobs).
	ReturnsQueueURL string `json:"returnsQueueUrl,omitempty"`
	// HistoryDays is how long the stack keeps what hangar runs, instance and cost read after an
	// instance or a run ends (the stack's history.days; 0: state.DefaultHistoryRetention).
	HistoryDays int `json:"historyDays,omitempty"`
}

// StackCap is the stack's bound on live instances (the stack's maxInstances), the same in every
// pool document, with the pools it counts over.
type StackCap struct {
	MaxInstances int      `json:"maxInstances"`
	Pools        []string `json:"pools"`
}

// MaxInstancesLimit bounds maxInstances: far beyond any account's quota, well within a count.
const MaxInstancesLimit = 100000

// Capped reports whether the pool, or the stack, bounds its live instances.
func (d *Document) Capped() bool { return d.MaxInstances > 0 || d.StackCap != nil }

// MaxHistoryDays bounds history.days: ten years.
const MaxHistoryDays = 3650

// HistoryRetention is how long the stack keeps its history: the store's setting
// (state.Store.HistoryRetention).
func (d *Document) HistoryRetention() time.Duration { return state.RetentionOf(d.HistoryDays) }

// Scopes a pool's label-routed runners are registered in.
const (
	JobScopeRepository   = "repository"
	JobScopeOrganization = "organization"
)

// Jobs is how a pool serves label-routed jobs: the labels that name it in runs-on, and where its
// just-in-time runners are registered.
type Jobs struct {
	// StackLabel is the label every label-routed job must carry to be Hangar's at all (the
	// stack's app.label, the same in every pool document of the stack).
	StackLabel string `json:"stackLabel"`
	// Labels name the pool (docs/labels.md, "Labels and routing").
	Labels []string `json:"labels"`
	// Scope is repository (the default, also when empty) or organization: runners registered in
	// the job's organisation, each in a runner group the dispatcher makes for the job's
	// repository alone (state.RunnerNames.RepositoryGroup).
	Scope string `json:"scope,omitempty"`
	// Installations are the App installations the stack serves (the stack's
	// github.installations, the same in every pool document); empty: any installation, the
	// repository alone decides (Admits).
	Installations []int64 `json:"installations,omitempty"`
	// QueueURL and DeadLetterQueueURL are the stack's jobs queue and its dead-letter queue, the
	// same in every document: what hangar status counts.
	QueueURL           string `json:"queueUrl,omitempty"`
	DeadLetterQueueURL string `json:"deadLetterQueueUrl,omitempty"`
}

// Why Admits refuses a job: errors.Is tells them apart.
var (
	ErrInstallation = errors.New("installation outside the stack's github.installations")
	ErrRepository   = errors.New("repository outside the pool's allowedRepositories")
)

// Admits says why a label-routed job of repository repo, delivered through App installation
// installation, may not use the pool: nil when it may. The webhook asks before recording a
// delivery, and the dispatcher again before placing the job.
func (d *Document) Admits(repo string, installation int64) error {
	if d.Jobs != nil && len(d.Jobs.Installations) > 0 && !slices.Contains(d.Jobs.Installations, installation) {
		return fmt.Errorf("%w: %d", ErrInstallation, installation)
	}
	if !d.RepoAllowed(repo) {
		return fmt.Errorf("%w of pool %s: %s", ErrRepository, d.Name, repo)
	}
	return nil
}

// OrgScope reports whether the pool's just-in-time runners belong to the organisation.
func (j *Jobs) OrgScope() bool { return j.Scope == JobScopeOrganization }

// RunnerLabels are the labels every just-in-time runner of the pool carries: self-hosted, the
// stack label and the pool's labels. Every runner of a pool carries the same, so any job routed
// to the pool can run on any of them.
func (j *Jobs) RunnerLabels() []string {
	return append([]string{names.SelfHostedLabel, j.StackLabel}, j.Labels...)
}

// LaunchTemplate names the pool's EC2 launch template.
type LaunchTemplate struct {
	ID      string `json:"id"`
	Version string `json:"version"`
}

// Subnet is one subnet instances may launch in.
type Subnet struct {
	ID string `json:"id"`
	AZ string `json:"az"`
}

// Timeouts are the deadlines of each state (docs/design.md §10).
type Timeouts struct {
	Created Duration `json:"created,omitzero"`
	Claimed Duration `json:"claimed,omitzero"`
	Running Duration `json:"running,omitzero"`
	Idle    Duration `json:"idle,omitzero"`
	Stopped Duration `json:"stopped,omitzero"`
}

// Default timeouts.
var DefaultTimeouts = Timeouts{
	Created: Duration(10 * time.Minute),
	Claimed: Duration(5 * time.Minute),
	Running: Duration(6 * time.Hour),
	Idle:    Duration(30 * time.Minute),
	Stopped: Duration(72 * time.Hour),
}

// DefaultGitHubURL is the GitHub server a pool serves unless its document names another.
const DefaultGitHubURL = "https://github.com"

// maxTimeout bounds every timeout.
const maxTimeout = 35 * 24 * time.Hour

// Runner says which GitHub runner the agent installs when the AMI has none.
type Runner struct {
	// Version is the actions/runner release, e.g. 2.321.0; empty when the AMI bakes the runner.
	Version string `json:"version,omitempty"`
	// BaseURL is where releases are downloaded from: BaseURL/v<version>/actions-runner-linux-<arch>-<version>.tar.gz.
	BaseURL string `json:"baseUrl,omitempty"`
	// SHA256 is the tarball's checksum per arch (x64, arm64).
	SHA256 map[string]string `json:"sha256,omitempty"`
	// User is the unprivileged user the runner runs as.
	User string `json:"user,omitempty"`
	// PreRunnerScript runs once per spec, as root, before the runner is installed.
	PreRunnerScript string `json:"preRunnerScript,omitempty"`
	// Sudo declares that the image makes the runner user root-equivalent (sudo, or membership of
	// a group such as docker). A job can then leave anything behind, so such a pool may only use
	// reuse repository or never. The agent refuses to serve when the user is in such a group
	// and the pool does not say so.
	Sudo bool `json:"sudo,omitempty"`
	// MetadataAccess lets the runner user reach the instance metadata service, and so the
	// instance role's credentials. Off by default: the agent blocks it with a firewall rule.
	// Turning it on weakens isolation (docs/security.md); only for pools whose jobs need the role.
	MetadataAccess bool `json:"metadataAccess,omitempty"`
	// UserNamespaces lets the runner's processes make user namespaces (rootless containers,
	// some sandboxes), and the runner user have subordinate ids (/etc/subuid, /etc/subgid). Off
	// by default: the agent refuses user namespaces to the runner, and refuses to serve when the
	// user has subordinate ids. Turning it on exposes the kernel's namespaced interfaces to jobs
	// (docs/security.md).
	UserNamespaces bool `json:"userNamespaces,omitempty"`
	// WritableDirs are directories outside the runner user's home and the shared temporary
	// directories that jobs may write to (absolute paths, not /). The agent removes the runner
	// user's entries in them after every run, as it does in /tmp; anything in them the user owns
	// is the run's, the image's content included.
	WritableDirs []string `json:"writableDirs,omitempty"`
	// LogInSummary says whether an instance's log tail (its pre-runner script's output, the
	// runner's registration output) may reach the workflow's step summary when an instance fails:
	// auto (the default, also when empty) shows it only to private and internal repositories,
	// always and never say so. A repository whose visibility is unknown counts as public.
	LogInSummary string `json:"logInSummary,omitempty"`
}

// Values of Runner.LogInSummary.
const (
	LogInSummaryAuto   = "auto"
	LogInSummaryAlways = "always"
	LogInSummaryNever  = "never"
)

// Repository visibilities, as the workflow's event payload names them.
const (
	VisibilityPublic   = "public"
	VisibilityPrivate  = "private"
	VisibilityInternal = "internal"
)

// ShowsLogTo reports whether the pool lets instances' log tails reach the step summary of a
// repository of the given visibility (public, private, internal; anything else counts as public).
func (r Runner) ShowsLogTo(visibility string) bool {
	switch r.LogInSummary {
	case LogInSummaryAlways:
		return true
	case LogInSummaryNever:
		return false
	}
	return visibility == VisibilityPrivate || visibility == VisibilityInternal
}

// Duration is a time.Duration written as a Go duration string ("10m", "6h").
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration %s: want a string such as \"10m\" or \"6h\"", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: want a Go duration such as \"10m\" or \"6h\"", s)
	}
	*d = Duration(v)
	return nil
}

// Parse decodes a pool document, applies defaults and validates it. Unknown fields are refused,
// so that a typo is an error rather than a silently ignored setting.
func Parse(data []byte) (*Document, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var d Document
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("pool document: %w", err)
	}
	if err := explicitZeroTimeouts(data); err != nil {
		return nil, err
	}
	d.applyDefaults()
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

// explicitZeroTimeouts refuses a timeout written as zero: it is never taken for the default
// (leaving the field out is how to get that), so that "0s" cannot silently mean five minutes.
func explicitZeroTimeouts(data []byte) error {
	var raw struct {
		Timeouts map[string]Duration `json:"timeouts"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("pool document: %w", err) // not reached: Decode has read it already
	}
	var errs []error
	for name, v := range raw.Timeouts {
		if v == 0 {
			errs = append(errs, fmt.Errorf("timeouts.%s: 0s: want more than 0, or leave it out for the default %s", name, DefaultTimeouts.byName(name)))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("pool document: %w", errors.Join(errs...))
	}
	return nil
}

// byName returns the timeout named as in the document.
func (t Timeouts) byName(name string) time.Duration {
	return map[string]Duration{"created": t.Created, "claimed": t.Claimed, "running": t.Running, "idle": t.Idle, "stopped": t.Stopped}[name].D()
}

func (d *Document) applyDefaults() {
	if d.Partition == "" {
		d.Partition = "aws"
	}
	if d.GitHubURL == "" {
		d.GitHubURL = DefaultGitHubURL
	}
	d.GitHubURL = strings.TrimRight(d.GitHubURL, "/")
	if d.AllocationStrategy == "" {
		d.AllocationStrategy = AllocationCost
	}
	if d.Runner.User == "" {
		d.Runner.User = "runner"
	}
	if d.Reuse == "" {
		d.Reuse = state.ReuseRepository
	}
	for _, f := range []struct{ v, def *Duration }{
		{&d.Timeouts.Created, &DefaultTimeouts.Created}, {&d.Timeouts.Claimed, &DefaultTimeouts.Claimed},
		{&d.Timeouts.Running, &DefaultTimeouts.Running}, {&d.Timeouts.Idle, &DefaultTimeouts.Idle},
		{&d.Timeouts.Stopped, &DefaultTimeouts.Stopped},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
}

// StateAccount returns the account the pool's instances are keyed by in the state table.
func (d *Document) StateAccount() state.Account {
	return state.Account{Partition: d.Partition, Region: d.Region, ID: d.Account}
}

// DrainedReason is why a drained pool's instances end, and the mark hangar drain leaves on the
// instances serving runs (state.Home.Retire).
const DrainedReason = "its pool is drained"

// Retire says why an instance of the pool that served a run may not be offered again ("" when
// it may): the pool's reuse is never (one run per instance), or the pool is drained.
func (d *Document) Retire() string {
	switch {
	case d.Reuse == state.ReuseNever:
		return "its pool's reuse is never: one run per instance"
	case d.Drained:
		return DrainedReason
	}
	return ""
}

// Home is how the pool's instances go back when a run ends, as this document says (written into
// their items at launch and at every claim): the idle timeout, in whole seconds rounded up, the
// queue, Retire, and how long the stack keeps history.
func (d *Document) Home() state.Home {
	return state.Home{IdleSecs: int64((d.Timeout(state.Idle) + time.Second - 1) / time.Second), Queue: d.QueueURL, Retire: d.Retire(),
		HistoryDays: d.HistoryDays}
}

// Timeout returns the deadline length of state st (0 for terminated).
func (d *Document) Timeout(st state.State) time.Duration {
	switch st {
	case state.Created:
		return d.Timeouts.Created.D()
	case state.Claimed:
		return d.Timeouts.Claimed.D()
	case state.Running:
		return d.Timeouts.Running.D()
	case state.Idle:
		return d.Timeouts.Idle.D()
	case state.Stopped:
		return d.Timeouts.Stopped.D()
	}
	return 0
}

// ParameterName is the SSM parameter a pool's document is published under.
func ParameterName(stack, pool string) string { return ParameterPath(stack) + pool }

// ParameterPath is the SSM path under which all of a stack's pool documents live.
func ParameterPath(stack string) string { return "/hangar/" + stack + "/pools/" }

// ChoosesTypesBySize reports whether the pool chooses its instance types by size
// (instanceRequirements) and they are not filled in yet (fleet.Launcher.Resolve fills them).
func (d *Document) ChoosesTypesBySize() bool {
	return d.InstanceRequirements != nil && len(d.InstanceTypes) == 0
}
