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
)

// endRun makes sure nothing of a run survives into the next one, in this order:
//
//  1. every process of the runner user is killed, however it left its process group;
//  2. the runner is removed from GitHub with removeToken (when there is one) by config.sh of a
//     fresh copy of the install, given only the run's registration files: nothing the run wrote
//     is run with the token;
//  3. (scrub) every process of the runner user is killed again (what the removal started);
//  4. what outlives processes is removed: the user's System V IPC objects, crontab and systemd
//     lingering;
//  5. Docker's containers, volumes, networks and images are removed, when Docker is here;
//  6. the run's directories, the user's home (made anew from the skeleton) and the user's files
//     in the shared temporary directories and the other directories it may write to (see
//     findSweepDirs) are removed, never following a symlink.
//
// Any failure is returned: the caller must not offer the instance again.
func (a *Agent) endRun(ctx context.Context, dirs runDirs, removeToken string, log *slog.Logger) error {
	if err := killUser(ctx, a.user.uid); err != nil {
		return fmt.Errorf("end the run's processes: %w", err)
	}
	if removeToken != "" {
		if out, err := a.deregister(ctx, dirs, removeToken); err != nil {
			log.Warn("remove runner from GitHub failed; release removes it by API", "error", err, "output", out)
		} else {
			log.Info("runner removed from GitHub")
		}
	} else {
		log.Info("no remove token; release removes the runner by API")
	}
	return a.scrub(ctx, log, dirs.base, dirs.base+"-remove")
}

// scrub removes whatever the runner user may have left: its processes (again), what outlives
// them, Docker's leftovers, the given trees, its home and its temporary files.
func (a *Agent) scrub(ctx context.Context, log *slog.Logger, trees ...string) error {
	u := a.user
	if err := killUser(ctx, u.uid); err != nil {
		return fmt.Errorf("end the runner user's processes: %w", err)
	}
	if err := removeLeftovers(ctx, u); err != nil {
		return fmt.Errorf("remove what outlives the run's processes: %w", err)
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
		errs = append(errs, removeOwned(d, u.uid))
	}
	errs = append(errs, a.sweepWritable())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove the run's files: %w", err)
	}
	return nil
}

// scrubAtStart cleans up after whatever ran before this agent started (an agent that crashed or
// was restarted mid-run, a run released meanwhile), unless the item still assigns the run whose
// directories are there: that run the agent resumes.
func (a *Agent) scrubAtStart(ctx context.Context) error {
	if it := a.last.Load(); it != nil && assigned(it) {
		if _, err := os.Stat(runDirsFor(a.cfg.RunsDir, it.RunID, it.RunAttempt).base); err == nil {
			return nil
		}
	}
	entries, err := os.ReadDir(a.cfg.RunsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", a.cfg.RunsDir, err)
	}
	trees := make([]string, len(entries))
	for i, e := range entries {
		trees[i] = filepath.Join(a.cfg.RunsDir, e.Name())
	}
	if len(trees) > 0 {
		a.log.Warn("runs left by an earlier agent; removing them", "count", len(trees))
	}
	return a.scrub(ctx, a.log, trees...)
}

// deregister runs `config.sh remove` from a fresh copy of the install holding only the run's
// registration files.
func (a *Agent) deregister(ctx context.Context, dirs runDirs, token string) (string, error) {
	fresh := runDirs{base: dirs.base + "-remove"}
	fresh.runner, fresh.work = filepath.Join(fresh.base, "runner"), filepath.Join(fresh.base, "work")
	if err := fresh.make(a.cfg.RunnerDir, a.user); err != nil {
		return "", err
	}
	if err := copyRegistration(dirs.runner, fresh.runner, a.user.uid, a.user.gid); err != nil {
		return "", fmt.Errorf("take the run's registration: %w", err)
	}
	return newScriptRunner(fresh, a.user, a.cfg.StopTimeout).remove(ctx, token)
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
