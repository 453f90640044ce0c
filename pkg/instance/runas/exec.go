package runas

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ExecCommand starts a runner script: the agent starts it as root, directly inside the run's
// cgroup. ExecMain then refuses user namespaces to what follows (unless told they are allowed),
// gives the process a session keyring of its own, becomes the runner user and executes the script
// in its own place: the script's process is the one the agent started, with the same pid.
const ExecCommand = "exec-as-runner"

// User is who ExecCommand becomes: an unprivileged uid, its primary gid and its other groups.
type User struct {
	UID, GID int
	Groups   []uint32
}

// ExecArgs are the arguments (the command's name first) that run argv as u, with user namespaces
// refused unless userNamespaces.
func ExecArgs(u User, userNamespaces bool, argv ...string) []string {
	groups := make([]string, len(u.Groups))
	for i, g := range u.Groups {
		groups[i] = strconv.FormatUint(uint64(g), 10)
	}
	return append([]string{ExecCommand, "--uid", strconv.Itoa(u.UID), "--gid", strconv.Itoa(u.GID),
		"--groups", strings.Join(groups, ","), "--user-namespaces=" + strconv.FormatBool(userNamespaces), "--"}, argv...)
}

// ExecMain runs ExecCommand with args (those after the command's name). It returns only on
// failure, with the process exit status.
func ExecMain(args []string) int {
	if err := runAs(args); err != nil {
		fmt.Fprintln(os.Stderr, "hangar-runas "+ExecCommand+":", err)
	}
	return 126
}

// execSpec is a parsed ExecCommand: who to become, whether user namespaces stay allowed, and
// the command.
type execSpec struct {
	user           User
	userNamespaces bool
	argv           []string
}

// parseExec reads ExecCommand's arguments (as ExecArgs writes them, less the command's name).
func parseExec(args []string) (execSpec, error) {
	fs := flag.NewFlagSet(ExecCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	uid := fs.Int("uid", -1, "")
	gid := fs.Int("gid", -1, "")
	groupList := fs.String("groups", "", "")
	userNamespaces := fs.Bool("user-namespaces", false, "")
	if err := fs.Parse(args); err != nil {
		return execSpec{}, err
	}
	spec := execSpec{user: User{UID: *uid, GID: *gid, Groups: []uint32{}}, userNamespaces: *userNamespaces, argv: fs.Args()}
	if *uid <= 0 || *gid <= 0 || len(spec.argv) == 0 {
		return execSpec{}, errors.New("want --uid and --gid of an unprivileged user, then -- and the command")
	}
	for _, g := range strings.Split(*groupList, ",") {
		if g == "" {
			continue
		}
		n, err := strconv.ParseUint(g, 10, 32)
		if err != nil || n == 0 {
			return execSpec{}, fmt.Errorf("--groups %q: want unprivileged group ids", *groupList)
		}
		spec.user.Groups = append(spec.user.Groups, uint32(n))
	}
	return spec, nil
}

// noCoreLimit is RLIMIT_CORE for everything the helper starts (see runAs).
const noCoreLimit = 1

// runAs becomes args' user and executes its command, or returns why it could not.
func runAs(args []string) error {
	spec, err := parseExec(args)
	if err != nil {
		return err
	}
	argv := spec.argv
	groups := make([]int, len(spec.user.Groups))
	for i, g := range spec.user.Groups {
		groups[i] = int(g)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	// One thread from here to the exec: the session keyring is per thread until then.
	runtime.LockOSThread()
	if !spec.userNamespaces {
		if err := denyUserNamespaces(); err != nil {
			return err
		}
	}
	// No core dumps (a crashing job's memory holds its secrets): a limit of 1 byte is below any
	// core a file could hold, and the kernel's mark for "never pipe one to a handler" either
	// (systemd-coredump, apport). Hard as well, so the runner user cannot raise it; one it lowers
	// to 0 still writes no file, and what a handler keeps of it is removed after the run.
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{Cur: noCoreLimit, Max: noCoreLimit}); err != nil {
		return fmt.Errorf("refuse core dumps: %w", err)
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("set groups: %w", err)
	}
	if err := syscall.Setgid(spec.user.GID); err != nil {
		return fmt.Errorf("set gid %d: %w", spec.user.GID, err)
	}
	if err := syscall.Setuid(spec.user.UID); err != nil {
		return fmt.Errorf("set uid %d: %w", spec.user.UID, err)
	}
	// A new anonymous session keyring, the user's own: not the agent's (which the runner would
	// possess otherwise) and not one shared with an earlier run's processes.
	if _, err := unix.KeyctlInt(unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0, 0, 0); err != nil && !errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("join a session keyring of its own: %w", err)
	}
	return syscall.Exec(path, argv, os.Environ())
}
