package agent

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/instance/runas"
)

// configureTimeout bounds config.sh (register and remove).
const configureTimeout = 2 * time.Minute

// scriptRunner drives one run's copy of the GitHub runner through its own scripts, as the
// unprivileged runner user, every process of it in the run's cgroup.
type scriptRunner struct {
	dir, work      string
	helper         string // the binary that starts each script (runas.ExecCommand)
	user           *runnerUser
	userNamespaces bool
	cgroup         *runCgroup
	env            []string
	stopTimeout    time.Duration
}

// newScriptRunner runs the runner in dirs as u, in the run's cgroup cg; user namespaces are
// refused to it unless userNamespaces.
func newScriptRunner(dirs runDirs, u *runnerUser, helper string, userNamespaces bool, cg *runCgroup, stopTimeout time.Duration) *scriptRunner {
	return &scriptRunner{dir: dirs.runner, work: dirs.work, helper: helper, user: u, userNamespaces: userNamespaces, cgroup: cg,
		stopTimeout: stopTimeout, env: u.env()}
}

// command starts script through the helper (runas.ExecCommand), as root directly inside the run's
// cgroup (CLONE_INTO_CGROUP: the process is never anywhere else); the helper refuses user
// namespaces, becomes the runner user and executes the script in its place.
func (r *scriptRunner) command(ctx context.Context, script string, args ...string) *exec.Cmd {
	argv := runas.ExecArgs(r.user.runas(), r.userNamespaces, append([]string{filepath.Join(r.dir, script)}, args...)...)
	cmd := exec.CommandContext(ctx, r.helper, argv...)
	cmd.Dir = r.dir
	cmd.Env = r.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, UseCgroupFD: true, CgroupFD: r.cgroup.fd()}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// configure registers the runner for run with the given labels (the run id first). The GitHub
// default labels (self-hosted, Linux, X64) are left off: with them, any job of the repository
// asking for `self-hosted` could land on a run's machine.
func (r *scriptRunner) configure(ctx context.Context, url, token, name, group string, labels []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, configureTimeout)
	defer cancel()
	out := newTail(state.MaxLogTail)
	args := []string{"--unattended", "--url", url, "--name", name,
		"--labels", strings.Join(labels, ","), "--work", r.work, "--replace", "--no-default-labels", "--disableupdate"}
	if group != "" {
		args = append(args, "--runnergroup", group)
	}
	cmd := r.command(ctx, "config.sh", args...)
	cmd.Env = withToken(cmd.Env, token)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return redact(out.String(), token), fmt.Errorf("config.sh: %w", err)
	}
	return redact(out.String(), token), nil
}

// withToken passes a registration token the way the runner reads inputs from its
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
