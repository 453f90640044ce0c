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
