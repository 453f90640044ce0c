package release

import (
	"errors"
	"fmt"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// Config is how a Releaser works; New applies the defaults to unset fields.
type Config struct {
	// DeregisterTimeout is how long agents have to deregister before their instances are
	// terminated instead of offered (default 2m).
	DeregisterTimeout time.Duration // deregister-timeout
	// PollInterval caps the wait between reads of the items (default 200ms; see state.Store.Poll).
	PollInterval time.Duration
}

// Defaults.
const (
	DefaultDeregisterTimeout = pool.DefaultDeregisterTimeout
	DefaultPollInterval      = pool.DefaultPollInterval
	maxDeregisterTimeout     = time.Hour
)

// ApplyDefaults fills unset fields.
func (c *Config) ApplyDefaults() {
	if c.DeregisterTimeout == 0 {
		c.DeregisterTimeout = DefaultDeregisterTimeout
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
}

// Validate refuses values out of range, every problem at once, naming the input. It changes
// nothing and makes no request.
func (c Config) Validate() error {
	var errs []error
	if c.DeregisterTimeout < time.Second || c.DeregisterTimeout > maxDeregisterTimeout {
		errs = append(errs, fmt.Errorf("deregister-timeout: %s: want 1s to %s", c.DeregisterTimeout, maxDeregisterTimeout))
	}
	if c.PollInterval < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("poll interval: %s: want 10ms or more", c.PollInterval))
	}
	return errors.Join(errs...)
}

// Request is a release asked for: which run, of which stack, and where its runners are
// registered. Field comments name the input each comes from; error messages use the same names.
type Request struct {
	Stack      string // stack
	RunID      string // GITHUB_RUN_ID
	Repository string // GITHUB_REPOSITORY
	Scope      string // runner-scope: repo or org (see RunnerScope)
}

// ApplyDefaults fills unset fields.
func (r *Request) ApplyDefaults() {
	if r.Stack == "" {
		r.Stack = names.DefaultStack
	}
	if r.Scope == "" {
		r.Scope = ghapi.ScopeRepo
	}
}

// Validate checks every field and reports all problems at once, each naming the input, the bad
// value and what is accepted. It changes nothing and makes no request.
func (r Request) Validate() error {
	var errs []error
	if err := names.ValidateStack(r.Stack); err != nil {
		errs = append(errs, fmt.Errorf("stack: %w", err))
	}
	if err := names.ValidateRunID(r.RunID); err != nil {
		errs = append(errs, fmt.Errorf("GITHUB_RUN_ID: %w", err))
	}
	if _, err := ghapi.ParseScope(r.Repository, r.Scope); err != nil {
		errs = append(errs, fmt.Errorf("GITHUB_REPOSITORY / runner-scope: %w", err))
	}
	return errors.Join(errs...)
}

// RunnerScope is where the run's runners are registered: Repository's, or its owner's for Scope
// org. It is the zero Scope unless Validate accepts Scope and Repository.
func (r Request) RunnerScope() ghapi.Scope {
	s, _ := ghapi.ParseScope(r.Repository, r.Scope)
	return s
}
