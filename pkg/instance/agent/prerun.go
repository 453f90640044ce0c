package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// ScriptShell runs the pool's pre-runner scripts, as root (the agent checks at start that only
// root can change it).
const ScriptShell = "/bin/sh"

// tail is an io.Writer that keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - 2*t.max; over > 0 { // trim in chunks, not on every write
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String returns the kept tail, cut at a character boundary.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return state.LogTail(string(t.buf), t.max)
}

// runPreRunner runs the pool's pre-runner script (as the agent's user, root on an instance) with
// a timeout, and returns its combined output's tail.
func runPreRunner(ctx context.Context, script string, timeout time.Duration, env []string) (string, error) {
	if script == "" {
		return "", nil
	}
	f, err := os.CreateTemp("", "hangar-pre-runner-*")
	if err != nil {
		return "", fmt.Errorf("pre-runner script: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(script); err != nil {
		f.Close()
		return "", fmt.Errorf("pre-runner script: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("pre-runner script: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := newTail(state.MaxLogTail)
	cmd := exec.CommandContext(ctx, ScriptShell, f.Name())
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, killed whole on timeout: a script's children must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return out.String(), fmt.Errorf("pre-runner script did not finish within %s", timeout)
	}
	if err != nil {
		return out.String(), fmt.Errorf("pre-runner script failed: %w", err)
	}
	return out.String(), nil
}
