package fleetsim

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
)

// Every agent runs under a shim, so that nothing it starts outlives it. The agent puts its
// runner, config.sh and pre-runner scripts in process groups of their own, so killing the agent's
// group does not reach them, and a parent-death signal on the agent would leave them to init. The
// shim is the simulator's own binary (a test binary, the demo, cmd/fleetsim: anything importing
// this package), re-executed with shimEnv set; this package's init runs it instead of the
// program. It
//
//   - makes itself a child subreaper: every descendant of the agent whose parent dies is
//     re-parented to the shim rather than to init;
//   - starts the agent (os.Args[1:]) with a parent-death signal of SIGKILL and writes its pid to
//     file descriptor 3;
//   - passes SIGTERM on to the agent (a graceful stop: systemd stopping the service); takes
//     SIGHUP or SIGINT as a power cut and kills the agent at once. The simulator gives the shim a
//     parent-death signal of SIGHUP, so the simulator's death is a power cut too;
//   - once the agent has exited, for whatever reason, kills and reaps every process left below
//     it (see sweep), then exits with the agent's status.
//
// The agent itself is untouched: same binary, arguments, environment (less shimEnv) and working
// directory as without the shim. Only a SIGKILL of the shim itself, which the simulator never
// sends, would leave the agent's children behind.
const shimEnv = "HANGAR_FLEETSIM_SHIM"

// hideShimEnv carries Config.Hide to the shim, which covers them before it starts the agent.
const hideShimEnv = "HANGAR_FLEETSIM_HIDE"

func init() {
	if os.Getenv(shimEnv) == "" {
		return
	}
	// Not os.Exit: in a test binary built with -race, that waits a second for late race reports
	// (GORACE atexit_sleep_ms), and every agent stop would wait with it. The shim has nothing to
	// flush.
	syscall.Exit(shimMain(os.Args[1:]))
}

// shimMain runs the shim around the command args and returns its exit status.
func shimMain(args []string) int {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "fleetsim shim")
	// Descriptor 3 carries the agent's pid to the simulator; the agent must not inherit it, or the
	// simulator would not see it close.
	syscall.CloseOnExec(3)
	pidOut := os.NewFile(3, "agent-pid")
	if len(args) == 0 {
		log.Error("no command to run")
		return 2
	}
	if err := becomeSubreaper(); err != nil {
		log.Error("cannot watch the agent's descendants", "error", err)
		return 1
	}
	// Before the agent starts: a power cut from here on is caught, not the default exit.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
	// As a subreaper the shim inherits the agent's orphans: reap those that die, as init would.
	orphans := make(chan os.Signal, 1)
	signal.Notify(orphans, syscall.SIGCHLD)
	if dir := os.Getenv(cpuShimEnv); dir != "" {
		// The agent, and all it starts, in the simulated instances' cgroup (see cpu_linux.go).
		if err := joinCPUGroup(dir); err != nil {
			log.Warn("join the instances' cpu cgroup; this agent runs at full weight", "error", err)
		}
	}
	if hide := os.Getenv(hideShimEnv); hide != "" {
		// In the mount namespace the simulator gave this shim: the agent's image lacks them.
		if err := hidePaths(filepath.SplitList(hide)); err != nil {
			log.Error("hide files from the agent", "error", err)
			return 1
		}
	}
	for _, env := range []string{shimEnv, cpuShimEnv, hideShimEnv} {
		if err := os.Unsetenv(env); err != nil {
			log.Error("clear the shim's environment variable", "name", env, "error", err)
			return 1
		}
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = procAttr(true, syscall.SIGKILL)
	done, err := startLocked(cmd)
	if err != nil {
		log.Error("start the agent", "error", err)
		return 1
	}
	if _, err := fmt.Fprintf(pidOut, "%d\n", cmd.Process.Pid); err != nil {
		log.Error("report the agent's pid", "error", err)
		_ = cmd.Process.Kill()
	}
	_ = pidOut.Close()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-orphans:
			reapOrphans(cmd.Process.Pid)
		case sig := <-sigs:
			if sig == syscall.SIGTERM {
				_ = cmd.Process.Signal(syscall.SIGTERM)
			} else {
				_ = cmd.Process.Kill()
			}
		}
	}
	if err := sweep(); err != nil {
		log.Error("kill what the agent left", "error", err)
	}
	if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && st.Signaled() {
		return 128 + int(st.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

// reapOrphans reaps the shim's dead children other than the agent (whose status cmd.Wait takes).
func reapOrphans(agent int) {
	for _, pid := range childrenOf(os.Getpid()) {
		if pid == agent {
			continue
		}
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	}
}

// sweep kills every process left below the shim and reaps it. The shim being a subreaper, every
// descendant of the dead agent is re-parented to it before its parent can be reaped: killing all
// children and reaping one at a time until none is left leaves nothing behind, however deep the
// tree and whatever process groups or sessions it made. Only call it once the agent has been
// reaped (it reaps any child).
func sweep() error {
	self := os.Getpid()
	for {
		for _, pid := range childrenOf(self) {
			_ = syscall.Kill(pid, syscall.SIGKILL) // a child's pid is not reused before we reap it
		}
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, syscall.ECHILD):
			return nil
		case errors.Is(err, syscall.EINTR), err == nil:
		default:
			return fmt.Errorf("reap: %w", err)
		}
	}
}
