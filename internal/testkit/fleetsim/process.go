package fleetsim

import (
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// startLocked starts cmd from a goroutine locked to its OS thread, and returns a channel closed
// once cmd has exited and been reaped.
//
// The kernel sends a parent-death signal (SysProcAttr.Pdeathsig) when the thread that forked the
// child exits, not when its process does (see the SysProcAttr documentation and
// https://go.dev/issue/27505). An unlocked goroutine forks from whichever thread it happens to run
// on, and the Go runtime ends a thread whenever a goroutine locked to it returns without
// unlocking; the child could then be killed while its parent lives. Here the forking thread
// belongs to the goroutine below until the child is reaped, and ends with it: the signal fires
// exactly when the starting process dies.
func startLocked(cmd *exec.Cmd) (<-chan struct{}, error) {
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends when this goroutine returns
		defer close(done)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return done, nil
}

// halt sends sig to a process started by startLocked and waits until it has exited; if it has
// not within grace, it is killed.
func halt(cmd *exec.Cmd, done <-chan struct{}, sig syscall.Signal, grace time.Duration) {
	_ = cmd.Process.Signal(sig)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	_ = cmd.Process.Kill()
	<-done
}
