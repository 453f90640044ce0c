//go:build unix

package fakerunner

import (
	"os/exec"
	"syscall"
	"time"
)

// killGroupOnCancel runs cmd in a process group of its own and makes the cancellation of its
// context kill the whole group: a job's command and every process it started, as the real
// runner kills a cancelled job's processes.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
}
