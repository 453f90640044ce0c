package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hangar-ci/hangar/pkg/instance/runas"
)

// configureTimeout bounds config.sh.
const configureTimeout = 2 * time.Minute

// jitConfigVar is how the runner takes its just-in-time configuration from its environment (the
// runner reads every input from ACTIONS_RUNNER_INPUT_<NAME>): on the command line, any local user
// could read it from the process list.
const jitConfigVar = "ACTIONS_RUNNER_INPUT_JITCONFIG"

// Run is one run on the host: its directories under a root-owned parent, its cgroup, and its copy
// of the GitHub runner, driven through the runner's own scripts as the unprivileged runner user,
// every process of it in the run's cgroup.
type Run struct {
	dirs           runDirs
	cgroup         *runCgroup
	user           *runnerUser
	helper         string // the binary that starts each script (runas.ExecCommand)
	userNamespaces bool
	escaped        func(stray string) // records an escape on the host (Strays)

	mu   sync.Mutex
	proc *runnerProc // the runner last started
}

// command starts script through the helper (runas.ExecCommand), as root directly inside the run's
// cgroup (CLONE_INTO_CGROUP: the process is never anywhere else); the helper refuses user
// namespaces (unless the pool allows them), becomes the runner user and executes the script in
// its place.
func (r *Run) command(ctx context.Context, env []string, script string, args ...string) *exec.Cmd {
	argv := runas.ExecArgs(r.user.runas(), r.userNamespaces, append([]string{filepath.Join(r.dirs.runner, script)}, args...)...)
	cmd := exec.CommandContext(ctx, r.helper, argv...)
	cmd.Dir = r.dirs.runner
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, UseCgroupFD: true, CgroupFD: r.cgroup.fd()}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Make makes the run's directories anew from the runner install (see runDirs.make).
func (r *Run) Make(install string) error { return r.dirs.make(install, r.user) }

// Registered reports whether the run's runner holds a registration under name (after an agent
// restart mid-run). The real runner records the name as agentName in .runner; the stand-in as
// name. The file is read through an os.Root: a symlink the run left there leads nowhere else.
func (r *Run) Registered(name string) bool {
	root, err := os.OpenRoot(r.dirs.runner)
	if err != nil {
		return false
	}
	defer func() { _ = root.Close() }()
	b, err := root.ReadFile(".runner")
	if err != nil {
		return false
	}
	var settings struct {
		AgentName string `json:"agentName"`
		Name      string `json:"name"`
	}
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) // the real runner writes a byte-order mark
	if json.Unmarshal(b, &settings) != nil {
		return false
	}
	return settings.AgentName == name || settings.Name == name
}

// Configure registers the run's runner (config.sh) at url under name with the given labels, in
// the organisation runner group when group is set, its output to out. The GitHub default labels
// (self-hosted, Linux, X64) are left off: with them, any job of the repository asking for
// `self-hosted` could land on a run's machine. The token goes through the environment (see
// withToken).
func (r *Run) Configure(ctx context.Context, url, token, name, group string, labels []string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, configureTimeout)
	defer cancel()
	args := []string{"--unattended", "--url", url, "--name", name,
		"--labels", strings.Join(labels, ","), "--work", r.dirs.work, "--replace", "--no-default-labels", "--disableupdate"}
	if group != "" {
		args = append(args, "--runnergroup", group)
	}
	cmd := r.command(ctx, withToken(r.user.env(), token), "config.sh", args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("config.sh: %w", err)
	}
	return nil
}

// withToken passes a registration token the way the runner reads inputs from its
// environment (ACTIONS_RUNNER_INPUT_<NAME>), not on the command line, where any local user could
// read it from the process list.
func withToken(env []string, token string) []string {
	return append(slices.Clone(env), "ACTIONS_RUNNER_INPUT_TOKEN="+token)
}

// withJITConfig returns env with the runner's just-in-time configuration.
func withJITConfig(env []string, config string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, jitConfigVar+"=") })
	return append(out, jitConfigVar+"="+config)
}

// runnerProc is a running run.sh.
type runnerProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// Start writes the run's job-started hook, which fails every job but those of run (of any run
// when empty) of repo, and starts run.sh with it, in its own process group; jitConfig, when set,
// is a just-in-time runner's configuration. out gets the runner's output; exited is called once
// with how it ended. Stop stops it; a later Start (a restart) replaces it.
func (r *Run) Start(run, repo, jitConfig string, out io.Writer, exited func(error)) error {
	hook, err := jobGuard{Run: run, Repo: repo}.write(r.dirs.base)
	if err != nil {
		return err
	}
	env := r.user.env()
	if jitConfig != "" {
		env = withJITConfig(env, jitConfig)
	}
	p := &runnerProc{done: make(chan struct{})}
	p.cmd = r.command(context.Background(), withJobStartedHook(env, hook), "run.sh")
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("run.sh: %w", err)
	}
	r.mu.Lock()
	r.proc = p
	r.mu.Unlock()
	go func() {
		err := p.cmd.Wait()
		exited(err)
		close(p.done)
	}()
	return nil
}

// Stop interrupts the runner's process group (the runner finishes or cancels its job and goes
// offline), and kills it if it has not exited within timeout.
func (r *Run) Stop(timeout time.Duration) error {
	r.mu.Lock()
	p := r.proc
	r.mu.Unlock()
	if p == nil {
		return nil
	}
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

// Close lets go of the run's cgroup (the run itself ends with Scrub).
func (r *Run) Close() { r.cgroup.close() }
