package agent

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
)

// Config is the agent's configuration; the host it serves runs on has its own (package host).
type Config struct {
	// Identity is the instance's, from instance metadata.
	Identity Identity
	// Pool is the instance's pool document (table, runner, pre-runner script, labels).
	Pool *pooldoc.Document
	// RunnerDir holds the GitHub runner install (config.sh, run.sh); it is installed there when
	// missing, then made root's and read-only. Runs never use it directly: each gets a copy.
	RunnerDir string
	// RunsDir is the root-owned parent of each run's directories (its runner copy and its work
	// directory), removed after the run.
	RunsDir string
	// StateDir holds what the agent keeps across restarts (the init marker of each spec).
	StateDir string
	// PollInterval is how often the agent reads its item when it has no working doorbell (one
	// request each; heartbeats are folded into the reads), and how often it checks on the runner
	// while serving.
	PollInterval time.Duration
	// SafetyInterval is how often the agent reads its item while its doorbell works: the read
	// that catches a lost ring. Each is a heartbeat when one is due.
	SafetyInterval time.Duration
	// DoorbellWait is each long poll of the doorbell (at most 20 s): an idle agent makes one
	// receive request per DoorbellWait.
	DoorbellWait time.Duration
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
	// ShutdownCommand powers the machine off, which is how the agent ends its instance: the
	// launch template's shutdown behaviour (terminate) makes that a termination.
	ShutdownCommand []string
	// Version is the agent's version, recorded with heartbeats.
	Version string
}

// Defaults of Config.
const (
	DefaultPollInterval      = time.Second
	DefaultSafetyInterval    = 15 * time.Second
	DefaultDoorbellWait      = 20 * time.Second
	DefaultIdlePollInterval  = 10 * time.Second
	DefaultHeartbeatInterval = 30 * time.Second
	DefaultSpotInterval      = 5 * time.Second
	DefaultTerminateGrace    = 2 * time.Minute
	DefaultStopTimeout       = 30 * time.Second
	DefaultPreRunnerTimeout  = 30 * time.Minute
	DefaultRunnerDir         = "/opt/hangar/runner"
	DefaultStateDir          = "/var/lib/hangar"
)

// DefaultShutdownCommand powers the machine off.
var DefaultShutdownCommand = []string{"shutdown", "-h", "now"}

// ApplyDefaults fills every zero field with its default.
func (c *Config) ApplyDefaults() {
	if c.RunnerDir == "" {
		c.RunnerDir = DefaultRunnerDir
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.RunsDir == "" {
		c.RunsDir = filepath.Join(c.StateDir, "runs")
	}
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&c.PollInterval, DefaultPollInterval)
	set(&c.SafetyInterval, DefaultSafetyInterval)
	set(&c.DoorbellWait, DefaultDoorbellWait)
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
	}{{"runner dir", c.RunnerDir}, {"runs dir", c.RunsDir}, {"state dir", c.StateDir}} {
		if !filepath.IsAbs(d.v) || filepath.Clean(d.v) == "/" {
			errs = append(errs, fmt.Errorf("%s %q: want an absolute path other than /", d.name, d.v))
		}
	}
	if r, err := filepath.Rel(c.RunnerDir, c.RunsDir); err == nil && !strings.HasPrefix(r, "..") {
		errs = append(errs, fmt.Errorf("runs dir %q: it is removed run by run; want a directory outside the runner dir %q", c.RunsDir, c.RunnerDir))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"poll interval", c.PollInterval}, {"safety interval", c.SafetyInterval}, {"doorbell wait", c.DoorbellWait}, {"idle poll interval", c.IdlePollInterval}, {"heartbeat interval", c.HeartbeatInterval},
		{"spot interval", c.SpotInterval}, {"terminate grace", c.TerminateGrace}, {"boot wait", c.BootWait},
		{"stop timeout", c.StopTimeout}, {"pre-runner timeout", c.PreRunnerTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %s: want more than 0", d.name, d.v))
		}
	}
	if c.PollInterval > 0 && c.PollInterval < 200*time.Millisecond {
		errs = append(errs, fmt.Errorf("poll interval %s: want 200ms or more (each poll is a DynamoDB request)", c.PollInterval))
	}
	if c.SafetyInterval > 0 && (c.SafetyInterval >= state.AckTimeout || c.SafetyInterval > c.HeartbeatInterval) {
		errs = append(errs, fmt.Errorf("safety interval %s: want less than the claim acknowledgement bound %s and at most the heartbeat interval %s (the read that catches a lost ring)",
			c.SafetyInterval, state.AckTimeout, c.HeartbeatInterval))
	}
	if c.DoorbellWait > doorbell.DefaultWait || (c.DoorbellWait > 0 && c.DoorbellWait%time.Second != 0) {
		errs = append(errs, fmt.Errorf("doorbell wait %s: want whole seconds from 1s to %s (SQS's longest long poll)", c.DoorbellWait, doorbell.DefaultWait))
	}
	if len(c.ShutdownCommand) == 0 {
		errs = append(errs, errors.New("shutdown command: empty"))
	}
	return errors.Join(errs...)
}
