package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// maxUserNamespaces is the kernel's bound on the user namespaces each user may make (a variable
// for tests). At 0 the kernel refuses them to every process, whatever filter it runs under or
// cgroup it is in: a runner-user process that escaped the helper (a session some image's
// service gave it) cannot make one either. Root's processes are refused too; an image whose
// services need user namespaces needs runner.userNamespaces.
var maxUserNamespaces = "/proc/sys/user/max_user_namespaces"

// refuseUserNamespaces makes the kernel refuse user namespaces, then proves it: the runner user
// runs unshare --user (with no filter), which must fail. Without unshare on the instance the proof
// is skipped.
func refuseUserNamespaces(ctx context.Context, unshare string, u *runnerUser) (proved bool, err error) {
	if err := os.WriteFile(maxUserNamespaces, []byte("0\n"), 0); err != nil {
		return false, fmt.Errorf("make the kernel refuse user namespaces (%s = 0): %w", maxUserNamespaces, err)
	}
	if unshare == "" {
		return false, nil
	}
	probe := rootCommand(ctx, unshare, "--user", "true")
	probe.Dir = "/"
	probe.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid)}}
	out, err := probe.CombinedOutput()
	if err == nil {
		return false, fmt.Errorf("the kernel still lets %s make user namespaces with %s = 0", u.name, maxUserNamespaces)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(string(out), "unshare failed") {
		return false, fmt.Errorf("the kernel's refusal of user namespaces to %s (%s = 0) is not proved: unshare --user as %s: %w: %s",
			u.name, maxUserNamespaces, u.name, err, strings.TrimSpace(string(out)))
	}
	return true, nil
}

// Kernel settings the agent makes its own unless the kernel is shared (variables for tests).
var (
	// corePattern says where the kernel sends a crashing process's memory. A pipe to a program
	// that reads nothing keeps it from any crash handler whatever a process's core limit, which
	// a job may lower to 0, the value a handler is still piped at: no core of any process is
	// kept on the instance.
	corePattern = "/proc/sys/kernel/core_pattern"
	// protectedHardlinks, at 1, lets a user link only files it may read and write: no hard link
	// of another's file survives the sweeps, which go by owner.
	protectedHardlinks = "/proc/sys/fs/protected_hardlinks"
)

// noCorePattern is corePattern's value: the kernel pipes the core to a program that exits.
const noCorePattern = "|/bin/false"

// takeKernel sets and proves the kernel-wide settings above: every process's cores go nowhere,
// and hard links are protected.
func takeKernel() error {
	for _, s := range []struct{ path, value string }{{corePattern, noCorePattern}, {protectedHardlinks, "1"}} {
		if err := os.WriteFile(s.path, []byte(s.value+"\n"), 0); err != nil {
			return fmt.Errorf("set %s to %s: %w", s.path, s.value, err)
		}
		if err := checkKernel(s.path, s.value); err != nil {
			return err
		}
	}
	return nil
}

// checkKernel proves a kernel setting holds value.
func checkKernel(path, value string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if got := strings.TrimSpace(string(b)); got != value {
		return fmt.Errorf("%s is %q, not %q", path, got, value)
	}
	return nil
}

// kernelHeld checks, after a run, that the kernel-wide settings Init made still hold (only root
// could have changed them, and then nothing of the instance can be trusted).
func (h *Host) kernelHeld() error {
	if h.cfg.SharedKernel {
		return nil
	}
	checks := [][2]string{{corePattern, noCorePattern}, {protectedHardlinks, "1"}}
	if !h.cfg.Runner.UserNamespaces {
		checks = append(checks, [2]string{maxUserNamespaces, "0"})
	}
	for _, c := range checks {
		if err := checkKernel(c[0], c[1]); err != nil {
			return fmt.Errorf("a kernel setting the agent made changed: %w", err)
		}
	}
	return nil
}
