package host

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hangar-ci/hangar/pkg/platform/wait"
)

// procRoot is where processes are listed (a variable for tests).
var procRoot = "/proc"

// userProcesses returns the pids of every process whose real, effective or saved uid is one for
// which owns holds. Processes that vanish while being read are skipped.
func userProcesses(owns func(uid int) bool) ([]int, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if owned, err := processOf(pid, owns); err == nil && owned {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// processOf reads the State and Uid lines of /proc/<pid>/status: a live process (not a zombie,
// which runs nothing and which its parent has yet to reap) whose real, effective or saved uid is
// one for which owns holds.
func processOf(pid int, owns func(uid int) bool) (bool, error) {
	f, err := os.Open(filepath.Join(procRoot, strconv.Itoa(pid), "status"))
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if st, ok := strings.CutPrefix(sc.Text(), "State:"); ok && strings.HasPrefix(strings.TrimSpace(st), "Z") {
			return false, nil
		}
		rest, ok := strings.CutPrefix(sc.Text(), "Uid:")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest)[:min(3, len(strings.Fields(rest)))] {
			if id, err := strconv.Atoi(f); err == nil && owns(id) {
				return true, nil
			}
		}
		return false, nil
	}
	return false, sc.Err()
}

// killTimeout bounds how long killUser keeps at it.
const killTimeout = 15 * time.Second

// killUser ends every process of a uid for which owns holds, whatever it did to leave its
// process group or session (setsid, double forks, a changed RUNNER_TRACKING_ID): each round stops
// every process found (SIGSTOP, so that none can fork while the round goes on), then kills them
// all, and rounds go on until one finds none. It fails if processes remain after killTimeout.
func killUser(ctx context.Context, owns func(uid int) bool) error {
	if owns(0) {
		return errors.New("refusing to kill every process of root")
	}
	ctx, cancel := context.WithTimeout(ctx, killTimeout)
	defer cancel()
	backoff := wait.Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond}
	for {
		pids, err := userProcesses(owns)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if err := backoff.Sleep(ctx); err != nil {
			left, _ := userProcesses(owns)
			return fmt.Errorf("processes of the runner user still alive after %s: %v", killTimeout, left)
		}
	}
}
