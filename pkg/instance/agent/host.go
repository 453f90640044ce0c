package agent

import (
	"context"
	"io"
	"time"
)

// Host is the machine the agent serves runs on, as far as the agent needs it: the runner user
// isolated, each run contained, nothing of a run left for the next. Package host implements it
// (cmd/agent wires it in); the reuse loop's tests use a fake.
type Host interface {
	// Init readies the machine for runs, on every start of the agent; out is output to report
	// with a failure.
	Init(ctx context.Context) (out string, err error)
	// Scrub ends whatever runs left (their processes, what outlives them, their files) and
	// removes trees besides, then checks that nothing is left. An error means something may have
	// survived: the instance must serve no other run.
	Scrub(ctx context.Context, trees ...string) error
	// HardenInstall makes the runner install in dir root's and read-only to everyone else.
	HardenInstall(dir string) error
	// OpenRun makes (or, for a run the agent resumes, reopens) the cgroup of the run whose
	// directories are dir.
	OpenRun(dir string) (Run, error)
}

// Run is one run on the host: its directories, its cgroup, and its copy of the runner, run as
// the runner user.
type Run interface {
	// Registered reports whether the run's runner holds a registration under name.
	Registered(name string) bool
	// Make makes the run's directories anew from the runner install.
	Make(install string) error
	// Configure registers the run's runner (config.sh) at url, its output to out.
	Configure(ctx context.Context, url, token, name, group string, labels []string, out io.Writer) error
	// Start starts the runner (run.sh), whose job-started hook fails every job but those of run
	// (any run when empty) of repo; jitConfig, when set, is a just-in-time runner's configuration.
	// out gets its output, and exited is called once with how it ended.
	Start(run, repo, jitConfig string, out io.Writer, exited func(error)) error
	// Stop interrupts the runner last started, and kills it after timeout.
	Stop(timeout time.Duration) error
	// Strays kills every process of the runner user outside the run's cgroup and describes each:
	// it escaped the run's containment.
	Strays() ([]string, error)
	// Close lets go of the run's cgroup; Scrub ends the run.
	Close()
}
