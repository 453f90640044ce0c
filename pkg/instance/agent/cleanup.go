package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
)

// endRun makes sure nothing of a run survives into the next one: kill, then clear, then check.
//
//  1. kill: every process of every run is killed as a whole (cgroup.kill of the jobs cgroup,
//     waiting until the kernel reports it empty), wherever a user namespace mapped its uid; then,
//     a second pass, every process of the runner user (and its subordinate uids), however it
//     left its process group;
//  2. clear: what outlives processes is removed: the user's System V IPC objects, at jobs,
//     crontab, systemd lingering and kernel keyrings; Docker's containers, volumes, networks and
//     images, when Docker is here; the run's directories (registration files included), the
//     user's home (made anew from the skeleton) and the user's files in the shared temporary
//     directories and the other directories it may write to (see findSweepDirs), never
//     following a symlink;
//  3. check: no process in the jobs cgroup or of the user, no at job, no crontab.
//
// The runner is not removed from GitHub here: release deletes the run's runners through the API.
// Any failure is returned: the caller must not offer the instance again.
func (a *Agent) endRun(ctx context.Context, dirs runDirs, log *slog.Logger) error {
	return a.scrub(ctx, log, dirs.base)
}

// scrub removes whatever the runner user may have left (see endRun): its processes, what
// outlives them, Docker's leftovers, the given trees, its home and its temporary files; then it
// checks that nothing is left.
func (a *Agent) scrub(ctx context.Context, log *slog.Logger, trees ...string) error {
	u := a.user
	if err := a.cgroups.killAll(ctx); err != nil {
		return fmt.Errorf("end the runs' processes: %w", err)
	}
	if err := killUser(ctx, u.owns); err != nil {
		return fmt.Errorf("end the runner user's processes: %w", err)
	}
	if err := removeLeftovers(ctx, u); err != nil {
		return fmt.Errorf("remove what outlives the run's processes: %w", err)
	}
	if err := a.clearKeyrings(ctx); err != nil {
		return err
	}
	if err := cleanDocker(ctx, a.cfg.Docker, log); err != nil {
		return fmt.Errorf("remove what the run left in Docker: %w", err)
	}
	var errs []error
	for _, t := range trees {
		errs = append(errs, removeTree(t))
	}
	errs = append(errs, u.resetHome())
	for _, d := range a.cfg.TmpDirs {
		errs = append(errs, removeOwned(d, u.owns))
	}
	errs = append(errs, a.sweepWritable())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove the run's files: %w", err)
	}
	if err := a.checkNothingLeft(ctx); err != nil {
		return fmt.Errorf("check after cleaning up: %w", err)
	}
	return nil
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
		if _, err := os.Stat(runDirsFor(a.cfg.RunsDir, it.RunID, it.RunAttempt).base); err == nil {
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
		if job != "" && e.Name() == filepath.Base(runDirsFor(a.cfg.RunsDir, job, 0).base) {
			a.interrupted = job
		}
	}
	if len(trees) > 0 {
		a.log.Warn("runs left by an earlier agent; removing them", "count", len(trees))
	}
	return a.scrub(ctx, a.log, trees...)
}

// dockerTimeout bounds each docker command.
const dockerTimeout = 2 * time.Minute

// cleanDocker removes every container, then every volume, network and image nothing uses any
// more, when the docker command is on the instance. Images go too: a run could have tagged a
// poisoned image under a name the next run pulls.
func cleanDocker(ctx context.Context, docker string, log *slog.Logger) error {
	path, found := lookPath(docker)
	if !found {
		return nil // no Docker on this instance
	}
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, dockerTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s %s: %w: %s", docker, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return string(out), nil
	}
	if _, err := run("info", "--format", "{{.ID}}"); err != nil {
		// The CLI without a daemon: no run can have left anything in Docker.
		log.Info("docker is installed but no daemon answers; nothing to clean", "error", err)
		return nil
	}
	ids, err := run("ps", "-aq")
	if err != nil {
		return err
	}
	if ids := strings.Fields(ids); len(ids) > 0 {
		if _, err := run(append([]string{"rm", "-f", "-v"}, ids...)...); err != nil {
			return err
		}
	}
	if _, err := run("system", "prune", "--all", "--volumes", "--force"); err != nil {
		return err
	}
	log.Info("docker cleaned", "containers", len(strings.Fields(ids)))
	return nil
}

// lookPath finds a command on PATH.
func lookPath(cmd string) (string, bool) {
	p, err := exec.LookPath(cmd)
	return p, err == nil
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
	return st.Mode().IsRegular() && ownedByRoot(st), nil
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
