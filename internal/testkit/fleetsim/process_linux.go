package fleetsim

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// procAttr returns the attributes of a child that dies with the process that started it: the
// kernel sends it deathSig when its parent's starting thread ends (see startLocked). With pgid it
// gets a process group of its own.
func procAttr(pgid bool, deathSig syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: pgid, Pdeathsig: deathSig}
}

// becomeSubreaper makes the calling process the reaper of its orphaned descendants: a process
// whose parent dies is re-parented to it instead of to init, so that none can slip away.
func becomeSubreaper() error {
	if err := prctl(prSetChildSubreaper, 1); err != nil {
		return fmt.Errorf("become a child subreaper: %w", err)
	}
	return nil
}

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER (linux/prctl.h), which package syscall only
// defines for some architectures.
const prSetChildSubreaper = 36

func prctl(option, arg uintptr) error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, option, arg, 0); errno != 0 {
		return errno
	}
	return nil
}

// childrenOf returns the pids of the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(child); ok && ppid == pid {
			out = append(out, child)
		}
	}
	return out
}

// parentOf reads a process's parent pid from /proc/<pid>/stat: "pid (comm) state ppid ...",
// where comm may itself hold spaces and parentheses.
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(string(fields[1]))
	return ppid, err == nil
}

// ProcessesUnder describes every live process, other than the caller, whose working directory or
// command line lies under dir: for tests, what a simulator with Config.Dir = dir still runs. It
// tells processes apart by dir alone, never by name (the test bed runs a metadata mock of its
// own). A process whose directory was deleted still counts.
func ProcessesUnder(dir string) []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return []string{"cannot read /proc: " + err.Error()}
	}
	dir = filepath.Clean(dir)
	inDir := func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	self := os.Getpid()
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		base := filepath.Join("/proc", e.Name())
		cwd, _ := os.Readlink(filepath.Join(base, "cwd")) // unreadable for zombies
		cwd = strings.TrimSuffix(cwd, " (deleted)")
		raw, _ := os.ReadFile(filepath.Join(base, "cmdline")) // empty for zombies
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if inDir(cwd) || slices.ContainsFunc(args, func(a string) bool { return a == dir || strings.Contains(a, dir+"/") }) {
			out = append(out, fmt.Sprintf("pid %d (cwd %s): %s", pid, cwd, strings.Join(args, " ")))
		}
	}
	return out
}

// ownMounts starts the process in a mount namespace of its own (Config.Hide).
func ownMounts(attr *syscall.SysProcAttr) { attr.Cloneflags |= syscall.CLONE_NEWNS }

// hidePaths covers each of paths with an empty file (/dev/null) in the calling process's mount
// namespace, made private first so that nothing reaches the machine's: what the agent looks for
// there is then missing, as in an image without it. The shim runs it before it starts the agent.
func hidePaths(paths []string) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mounts private: %w", err)
	}
	for _, p := range paths {
		if err := syscall.Mount("/dev/null", p, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("cover %s: %w", p, err)
		}
	}
	return nil
}
