package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// init readies the instance: the host first (the runner user, the cgroups, the metadata
// firewall, at and cron; Host.Init), then what an earlier agent left is removed (scrubAtStart),
// then, once per spec (a root-owned marker), the pre-runner script and the runner install. READY
// follows; a failure is signalled as FAILED with the log tail.
func (a *Agent) init(ctx context.Context) error {
	if out, err := a.host.Init(ctx); err != nil {
		return a.failInit(ctx, err, out)
	}
	if err := a.scrubAtStart(ctx); err != nil {
		return a.failInit(ctx, fmt.Errorf("clean up after an earlier agent: %w", err), "")
	}
	if done, err := a.initDone(); err != nil {
		return a.failInit(ctx, err, "")
	} else if done && runnerInstalled(a.cfg.RunnerDir) {
		a.log.Info("initialised before for this spec; straight to the reuse loop", "spec", a.cfg.Pool.SpecHash)
	} else {
		if err := a.initOnce(ctx); err != nil {
			return err
		}
	}
	if err := a.signalLatest(ctx, state.Signal{Name: state.SignalReady}); err != nil {
		a.log.Warn("could not signal READY; serving anyway", "error", err)
	}
	return nil
}

// initOnce runs the pre-runner script and installs the runner, then records that this spec is
// done, so that a restarted agent or an instance started from stopped does not do it again.
func (a *Agent) initOnce(ctx context.Context) error {
	p := a.cfg.Pool
	preLog, err := runPreRunner(ctx, p.Runner.PreRunnerScript, a.cfg.PreRunnerTimeout, []string{
		"HANGAR_POOL=" + p.Name, "HANGAR_INSTANCE_ID=" + a.cfg.Identity.InstanceID,
	})
	if err != nil {
		return a.failInit(ctx, err, preLog)
	}
	installLog, err := installRunner(ctx, a.http, p.Runner, a.cfg.Identity.Arch, a.cfg.RunnerDir)
	if err != nil {
		return a.failInit(ctx, err, preLog)
	}
	if err := a.host.HardenInstall(a.cfg.RunnerDir); err != nil {
		return a.failInit(ctx, fmt.Errorf("make the runner install root's and read-only: %w", err), installLog)
	}
	a.log.Info("runner ready", "detail", installLog)
	if err := a.markInitDone(); err != nil {
		return a.failInit(ctx, err, "")
	}
	return nil
}

func (a *Agent) failInit(ctx context.Context, cause error, logTail string) error {
	msg := logTail
	if msg != "" && !strings.HasSuffix(msg, "\n") {
		msg += "\n"
	}
	msg += "hangar-agent: " + cause.Error()
	if err := a.signalLatest(ctx, state.Signal{Name: state.SignalFailed, Log: msg}); err != nil {
		a.log.Error("could not signal FAILED", "error", err)
	}
	return cause
}

// runDir is the root-owned parent of the directories of a run (or job) at attempt.
func (a *Agent) runDir(run string, attempt int) string {
	return filepath.Join(a.cfg.RunsDir, run+"-"+strconv.Itoa(attempt))
}

// scrubAtStart cleans up after whatever ran before this agent started (an agent that crashed or
// was restarted mid-run, a run released meanwhile), unless the item still assigns the run whose
// directories are there: that run the agent resumes. A label-routed job is never resumed: its
// just-in-time runner died with the agent before this one and cannot be taken back, so the scrub
// ends it whether or not the item still assigns it (the completed webhook may let it go at any
// moment, before this agent's loop even looks), and the reuse loop says so and returns the
// instance (interrupted).
func (a *Agent) scrubAtStart(ctx context.Context) error {
	it := a.last.Load()
	if it != nil && assigned(it) && !names.IsJobKey(it.RunID) {
		if _, err := os.Stat(a.runDir(it.RunID, it.RunAttempt)); err == nil {
			return nil
		}
	}
	var job string // the label-routed job the item assigns, or last let go of
	switch {
	case it == nil:
	case names.IsJobKey(it.RunID) && assigned(it):
		job = it.RunID
	case names.IsJobKey(it.LastRunID) && it.RunID == "":
		job = it.LastRunID
	}
	entries, err := os.ReadDir(a.cfg.RunsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", a.cfg.RunsDir, err)
	}
	trees := make([]string, len(entries))
	for i, e := range entries {
		trees[i] = filepath.Join(a.cfg.RunsDir, e.Name())
		if job != "" && trees[i] == a.runDir(job, 0) {
			a.interrupted = job
		}
	}
	if len(trees) > 0 {
		a.log.Warn("runs left by an earlier agent; removing them", "count", len(trees))
	}
	return a.host.Scrub(ctx, trees...)
}

// initMarker is the file that says init ran for a spec.
func (a *Agent) initMarker() string {
	return filepath.Join(a.cfg.StateDir, "init-"+safeName(a.cfg.Pool.SpecHash)+".done")
}

// initDone reports whether init ran to its end for the pool's current spec on this instance.
// The marker must be root's: one the runner user could have made does not count.
func (a *Agent) initDone() (bool, error) {
	st, err := os.Lstat(a.initMarker())
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the init marker: %w", err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	return st.Mode().IsRegular() && ok && sys.Uid == 0, nil
}

func (a *Agent) markInitDone() error {
	if err := os.MkdirAll(a.cfg.StateDir, 0o755); err != nil {
		return fmt.Errorf("record init: %w", err)
	}
	if err := os.WriteFile(a.initMarker(), []byte(a.cfg.Pool.SpecHash+"\n"), 0o644); err != nil {
		return fmt.Errorf("record init: %w", err)
	}
	return nil
}

// safeName keeps letters, digits, '.', '_' and '-' of s, for a file name.
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, s)
}
