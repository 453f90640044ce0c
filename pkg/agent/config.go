package agent

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hangar-ci/hangar/pkg/poolconfig"
	"github.com/hangar-ci/hangar/pkg/state"
)

// Config is everything the agent needs to run.
type Config struct {
	// Identity is the instance's, from instance metadata.
	Identity Identity
	// Pool is the instance's pool document (table, runner, pre-runner script, labels).
	Pool *poolconfig.Document
	// RunnerDir holds the GitHub runner (config.sh, run.sh); it is installed there when missing.
	RunnerDir string
	// WorkDir is the runner's work directory, wiped after every run.
	WorkDir string
	// WipeDirs are further directories whose contents are wiped after every run (the runner
	// user's temp directory, say).
	WipeDirs []string
	// RunAs is the unprivileged user the runner runs as; empty runs it as the agent's own user.
	RunAs string
	// PollInterval is how often the agent reads its item (one request each; heartbeats are
	// folded into the polls). At most one a second keeps an idle instance at 3,600 requests an
	// hour.
	PollInterval time.Duration
	// IdlePollInterval is the poll interval once the agent takes no more work (init failed, spot
	// interruption): it only has to notice its own termination.
	IdlePollInterval time.Duration
	// HeartbeatInterval is how often heartbeatAt is written.
	HeartbeatInterval time.Duration
	// SpotInterval is how often the metadata service is asked for a spot interruption notice.
	SpotInterval time.Duration
	// TerminateGrace is how far past its threshold the instance may run before the agent
	// terminates it itself (refresh normally does it first, and records why).
	TerminateGrace time.Duration
	// BootWait is how long the agent waits for its item to appear at start before terminating
	// the instance as an orphan.
	BootWait time.Duration
	// StopTimeout is how long the runner has to stop after an interrupt before it is killed.
	StopTimeout time.Duration
	// PreRunnerTimeout bounds the pre-runner script.
	PreRunnerTimeout time.Duration
	// ShutdownCommand powers the machine off when EC2 cannot be asked to terminate it; the
	// launch template's shutdown behaviour (terminate) makes that a termination.
	ShutdownCommand []string
	// Version is the agent's version, recorded with heartbeats.
	Version string
}

// Defaults of Config.
const (
	DefaultPollInterval      = time.Second
	DefaultIdlePollInterval  = 10 * time.Second
	DefaultHeartbeatInterval = 30 * time.Second
	DefaultSpotInterval      = 5 * time.Second
	DefaultTerminateGrace    = 2 * time.Minute
	DefaultStopTimeout       = 30 * time.Second
	DefaultPreRunnerTimeout  = 30 * time.Minute
	DefaultRunnerDir         = "/opt/hangar/runner"
)

// DefaultShutdownCommand powers the machine off.
var DefaultShutdownCommand = []string{"shutdown", "-h", "now"}

// ApplyDefaults fills every zero field with its default.
func (c *Config) ApplyDefaults() {
	if c.RunnerDir == "" {
		c.RunnerDir = DefaultRunnerDir
	}
	if c.WorkDir == "" {
		c.WorkDir = filepath.Join(c.RunnerDir, "_work")
	}
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&c.PollInterval, DefaultPollInterval)
	set(&c.IdlePollInterval, DefaultIdlePollInterval)
	set(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	set(&c.SpotInterval, DefaultSpotInterval)
	set(&c.TerminateGrace, DefaultTerminateGrace)
	set(&c.StopTimeout, DefaultStopTimeout)
	set(&c.PreRunnerTimeout, DefaultPreRunnerTimeout)
	if c.Pool != nil {
		set(&c.BootWait, c.Pool.Timeout(state.Created))
	}
	if len(c.ShutdownCommand) == 0 {
		c.ShutdownCommand = DefaultShutdownCommand
	}
}

// Validate checks the configuration; messages name the field and the value.
func (c *Config) Validate() error {
	var errs []error
	if err := c.Identity.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Pool == nil {
		errs = append(errs, errors.New("pool document: missing"))
	}
	for _, d := range []struct {
		name string
		v    string
	}{{"runner dir", c.RunnerDir}, {"work dir", c.WorkDir}} {
		if !filepath.IsAbs(d.v) {
			errs = append(errs, fmt.Errorf("%s %q: want an absolute path", d.name, d.v))
		}
	}
	for _, d := range c.WipeDirs {
		if !filepath.IsAbs(d) || filepath.Clean(d) == "/" {
			errs = append(errs, fmt.Errorf("wipe dir %q: want an absolute path other than /", d))
		}
	}
	if filepath.Clean(c.WorkDir) == "/" || filepath.Clean(c.WorkDir) == filepath.Clean(c.RunnerDir) {
		errs = append(errs, fmt.Errorf("work dir %q: it is wiped after every run; want a directory of its own", c.WorkDir))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"poll interval", c.PollInterval}, {"idle poll interval", c.IdlePollInterval}, {"heartbeat interval", c.HeartbeatInterval},
		{"spot interval", c.SpotInterval}, {"terminate grace", c.TerminateGrace}, {"boot wait", c.BootWait},
		{"stop timeout", c.StopTimeout}, {"pre-runner timeout", c.PreRunnerTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %s: want more than 0", d.name, d.v))
		}
	}
	if c.PollInterval > 0 && c.PollInterval < 200*time.Millisecond {
		errs = append(errs, fmt.Errorf("poll interval %s: want 200ms or more (each poll is a DynamoDB request)", c.PollInterval))
	}
	if len(c.ShutdownCommand) == 0 {
		errs = append(errs, errors.New("shutdown command: empty"))
	}
	return errors.Join(errs...)
}
