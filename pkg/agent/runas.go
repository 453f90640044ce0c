package agent

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// RunAsCommand is the agent's hidden subcommand that starts a runner script: the agent runs
// itself so, as root, inside the run's cgroup (cmd/agent dispatches it). RunAsMain then refuses
// user namespaces to what follows (unless told they are allowed), gives the process a session
// keyring of its own, becomes the runner user and executes the script in its own place: the
// script's process is the one the agent started, with the same pid.
const RunAsCommand = "exec-as-runner"

// runAsArgs are RunAsMain's arguments for running argv as u (user namespaces allowed or not).
func runAsArgs(u *runnerUser, userNamespaces bool, argv ...string) []string {
	groups := make([]string, len(u.groups))
	for i, g := range u.groups {
		groups[i] = strconv.FormatUint(uint64(g), 10)
	}
	return append([]string{RunAsCommand, "--uid", strconv.Itoa(u.uid), "--gid", strconv.Itoa(u.gid),
		"--groups", strings.Join(groups, ","), "--user-namespaces=" + strconv.FormatBool(userNamespaces), "--"}, argv...)
}

// RunAsMain runs the RunAsCommand with args (those after the subcommand's name). It returns only
// on failure, with the process exit status.
func RunAsMain(args []string) int {
	if err := runAs(args); err != nil {
		fmt.Fprintln(os.Stderr, "hangar-agent "+RunAsCommand+":", err)
	}
	return 126
}

func runAs(args []string) error {
	fs := flag.NewFlagSet(RunAsCommand, flag.ContinueOnError)
	uid := fs.Int("uid", -1, "")
	gid := fs.Int("gid", -1, "")
	groupList := fs.String("groups", "", "")
	userNamespaces := fs.Bool("user-namespaces", false, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	argv := fs.Args()
	if *uid <= 0 || *gid <= 0 || len(argv) == 0 {
		return errors.New("want --uid and --gid of an unprivileged user, then -- and the command")
	}
	groups := []int{}
	for _, g := range strings.Split(*groupList, ",") {
		if g == "" {
			continue
		}
		n, err := strconv.Atoi(g)
		if err != nil || n <= 0 {
			return fmt.Errorf("--groups %q: want unprivileged group ids", *groupList)
		}
		groups = append(groups, n)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	// One thread from here to the exec: the session keyring is per thread until then.
	runtime.LockOSThread()
	if !*userNamespaces {
		if err := denyUserNamespaces(); err != nil {
			return err
		}
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("set groups: %w", err)
	}
	if err := syscall.Setgid(*gid); err != nil {
		return fmt.Errorf("set gid %d: %w", *gid, err)
	}
	if err := syscall.Setuid(*uid); err != nil {
		return fmt.Errorf("set uid %d: %w", *uid, err)
	}
	// A new anonymous session keyring, the user's own: not the agent's (which the runner would
	// possess otherwise) and not one shared with an earlier run's processes.
	if _, err := unix.KeyctlInt(unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0, 0, 0); err != nil && !errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("join a session keyring of its own: %w", err)
	}
	return syscall.Exec(path, argv, os.Environ())
}
