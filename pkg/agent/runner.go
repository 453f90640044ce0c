package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hangar-ci/hangar/pkg/state"
)

// configureTimeout bounds config.sh (register and remove).
const configureTimeout = 2 * time.Minute

// scriptRunner drives the GitHub runner through its own scripts in dir, as an unprivileged user.
type scriptRunner struct {
	dir, work   string
	cred        *syscall.Credential // nil: the agent's own user
	env         []string
	stopTimeout time.Duration
}

// newScriptRunner prepares to run the runner in dir as runAs ("" for the agent's own user), and
// hands dir and work to that user.
func newScriptRunner(dir, work, runAs string, stopTimeout time.Duration) (*scriptRunner, error) {
	r := &scriptRunner{dir: dir, work: work, stopTimeout: stopTimeout, env: os.Environ()}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	if runAs == "" {
		return r, nil
	}
	u, err := user.Lookup(runAs)
	if err != nil {
		return nil, fmt.Errorf("runner user %q: %w", runAs, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if uid == 0 {
		return nil, fmt.Errorf("runner user %q is root: the runner must run unprivileged", runAs)
	}
	r.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	r.env = append(os.Environ(), "HOME="+u.HomeDir, "USER="+u.Username, "LOGNAME="+u.Username)
	for _, d := range []string{dir, work} {
		if err := chownTree(d, uid, gid); err != nil {
			return nil, fmt.Errorf("hand %s to %s: %w", d, runAs, err)
		}
	}
	return r, nil
}

func chownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

func (r *scriptRunner) command(ctx context.Context, script string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(r.dir, script), args...)
	cmd.Dir = r.dir
	cmd.Env = r.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: r.cred}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// configure registers the runner for run with the given labels (the run id first). The GitHub
// default labels (self-hosted, Linux, X64) are left off: with them, any job of the repository
// asking for `self-hosted` could land on a run's machine.
func (r *scriptRunner) configure(ctx context.Context, url, token, name string, labels []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, configureTimeout)
	defer cancel()
	out := newTail(state.MaxLogTail)
	cmd := r.command(ctx, "config.sh", "--unattended", "--url", url, "--name", name,
		"--labels", strings.Join(labels, ","), "--work", r.work, "--replace", "--no-default-labels", "--disableupdate")
	cmd.Env = withToken(cmd.Env, token)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return redact(out.String(), token), fmt.Errorf("config.sh: %w", err)
	}
	return redact(out.String(), token), nil
}

// remove deregisters the runner from GitHub with a remove token.
func (r *scriptRunner) remove(ctx context.Context, token string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, configureTimeout)
	defer cancel()
	out := newTail(state.MaxLogTail)
	cmd := r.command(ctx, "config.sh", "remove", "--unattended")
	cmd.Env = withToken(cmd.Env, token)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return redact(out.String(), token), fmt.Errorf("config.sh remove: %w", err)
	}
	return redact(out.String(), token), nil
}

// forget deletes the local registration so that the next configure starts clean; used when no
// remove token is at hand (release then deletes the runner on GitHub itself).
func (r *scriptRunner) forget() error {
	var errs []error
	for _, f := range []string{".runner", ".credentials", ".credentials_rsaparams"} {
		if err := os.Remove(filepath.Join(r.dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// withToken passes a registration or remove token the way the runner reads inputs from its
// environment (ACTIONS_RUNNER_INPUT_<NAME>), not on the command line, where any local user could
// read it from the process list.
func withToken(env []string, token string) []string {
	return append(slices.Clone(env), "ACTIONS_RUNNER_INPUT_TOKEN="+token)
}

func redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "***")
}

// runnerProc is a running run.sh.
type runnerProc struct {
	cmd  *exec.Cmd
	out  *tail
	done chan struct{}
	err  error
}

// start starts run.sh in its own process group.
func (r *scriptRunner) start() (*runnerProc, error) {
	p := &runnerProc{out: newTail(state.MaxLogTail), done: make(chan struct{})}
	p.cmd = r.command(context.Background(), "run.sh")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("run.sh: %w", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop interrupts the runner's process group (the runner finishes or cancels its job and goes
// offline), and kills it if it has not exited within timeout.
func (p *runnerProc) stop(timeout time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGINT)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("runner did not stop within %s of an interrupt; killed", timeout)
	}
}

// wipe removes everything inside dir (not dir itself).
func wipe(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
