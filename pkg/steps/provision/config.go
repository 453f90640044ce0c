package provision

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/platform/ghurl"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// Config is one provision request. Field comments name the action input each comes from; error
// messages use the same names.
type Config struct {
	Stack string // stack
	Pool  string // pool
	Count int    // instance-count
	// UsageClass is spot, on-demand or spot-fallback; empty takes the pool's market.
	UsageClass          string        // usage-class
	InstanceTypes       []string      // allowed-instance-types
	MinVCPU             int           // min-vcpu
	MinMemoryMiB        int           // min-memory-mib
	MaxRuntime          time.Duration // max-runtime (0: the pool's running timeout)
	RegistrationTimeout time.Duration // registration-timeout
	// WaitForCapacity waits, until the registration timeout, for room under a pool's or the
	// stack's maxInstances; without it a provision over the cap fails at once.
	WaitForCapacity bool              // wait-for-capacity
	Scope           string            // runner-scope: repo or org (see RunnerScope)
	RunnerGroup     string            // runner-group: org runner group (default: the pool's runnerGroup)
	Labels          []string          // labels: extra runner labels
	Tags            map[string]string // tags: extra instance tags
	// From the workflow's environment.
	RunID      string // GITHUB_RUN_ID
	RunAttempt int    // GITHUB_RUN_ATTEMPT
	Repository string // GITHUB_REPOSITORY
	// ServerURL must be the GitHub server the pool document pins (githubUrl): runners register
	// there, and the pool refuses a workflow of another server.
	ServerURL string // GITHUB_SERVER_URL
	// PollInterval caps the wait between reads while waiting (default 200ms; see state.Store.Poll).
	PollInterval time.Duration
}

// RunnerScope is where runners are registered: Repository's, or its owner's for Scope org. It is
// the zero Scope unless Validate accepts Scope and Repository.
func (c Config) RunnerScope() ghapi.Scope {
	s, _ := ghapi.ParseScope(c.Repository, c.Scope)
	return s
}

// Defaults.
const (
	DefaultCount               = 1
	DefaultRegistrationTimeout = 5 * time.Minute
	DefaultPollInterval        = 200 * time.Millisecond
	DefaultScope               = ghapi.ScopeRepo
	DefaultServerURL           = "https://github.com"
	maxRegistrationTimeout     = time.Hour
)

// ApplyDefaults fills unset fields (Run applies them; a caller that validates first applies them
// before Validate). Count has no default here: 0 is refused, and the instance-count input
// defaults to DefaultCount.
func (c *Config) ApplyDefaults() {
	if c.Stack == "" {
		c.Stack = names.DefaultStack
	}
	if c.RegistrationTimeout == 0 {
		c.RegistrationTimeout = DefaultRegistrationTimeout
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.Scope == "" {
		c.Scope = DefaultScope
	}
	if c.ServerURL == "" {
		c.ServerURL = DefaultServerURL
	}
}

// Validate checks every input and reports all problems at once, each naming the input, the bad
// value and what is accepted. It changes nothing and makes no request.
func (c Config) Validate() error {
	var errs []error
	bad := func(input, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", input, fmt.Sprintf(format, a...)))
	}
	if err := names.ValidateStack(c.Stack); err != nil {
		bad("stack", "%v", err)
	}
	if c.Pool == "" {
		bad("pool", "empty: want the name of a pool of the stack")
	} else if err := names.ValidatePool(c.Pool); err != nil {
		bad("pool", "%v", err)
	}
	if c.Count < 1 || c.Count > pool.MaxCount {
		bad("instance-count", "%d: want 1 to %d", c.Count, pool.MaxCount)
	}
	if c.UsageClass != "" {
		if err := pooldoc.ValidateMarket(c.UsageClass); err != nil {
			bad("usage-class", "%v (or leave it empty for the pool's)", err)
		}
	}
	for _, p := range c.InstanceTypes {
		if err := names.ValidateTypePattern(p); err != nil {
			bad("allowed-instance-types", "%v", err)
		}
	}
	if c.MinVCPU < 0 || c.MinVCPU > 1024 {
		bad("min-vcpu", "%d: want 0 to 1024", c.MinVCPU)
	}
	if c.MinMemoryMiB < 0 || c.MinMemoryMiB > 24<<20 {
		bad("min-memory-mib", "%d: want 0 to %d", c.MinMemoryMiB, 24<<20)
	}
	if c.MaxRuntime < 0 || (c.MaxRuntime > 0 && c.MaxRuntime < time.Minute) {
		bad("max-runtime", "%s: want a duration of at least 1m, such as 2h (or leave it empty for the pool's)", c.MaxRuntime)
	}
	if c.RegistrationTimeout < 10*time.Second || c.RegistrationTimeout > maxRegistrationTimeout {
		bad("registration-timeout", "%s: want 10s to %s", c.RegistrationTimeout, maxRegistrationTimeout)
	}
	if c.RunnerGroup != "" {
		if err := names.ValidateRunnerGroup(c.RunnerGroup); err != nil {
			bad("runner-group", "%v", err)
		}
	}
	for _, l := range c.Labels {
		if err := names.ValidateLabel(l); err != nil {
			bad("labels", "%v", err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Tags)) {
		if err := names.ValidateTag(k, c.Tags[k]); err != nil {
			bad("tags", "%v", err)
		}
	}
	if err := names.ValidateRunID(c.RunID); err != nil {
		bad("GITHUB_RUN_ID", "%v", err)
	}
	if c.RunAttempt < 1 {
		bad("GITHUB_RUN_ATTEMPT", "%d: want 1 or more", c.RunAttempt)
	}
	if _, err := ghapi.ParseScope(c.Repository, c.Scope); err != nil {
		if errors.Is(err, ghapi.ErrScopeKind) {
			bad("runner-scope", "%q: want repo or org", c.Scope)
		} else {
			bad("GITHUB_REPOSITORY", "%v", err)
		}
	}
	if err := ghurl.CheckURL(c.ServerURL); err != nil {
		bad("GITHUB_SERVER_URL", "%v", err)
	}
	if c.PollInterval < 10*time.Millisecond {
		bad("poll interval", "%s: want 10ms or more", c.PollInterval)
	}
	return errors.Join(errs...)
}
