package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Strays kills every process of the runner user (or its subordinate uids) that is outside the
// run's cgroup, and describes each: it escaped the run's containment (a session some service of
// the image gave the user, or a way in not closed yet), and runs without the helper's filter or
// the firewall's cgroup match. Call it while the run runs; processes that end meanwhile are
// skipped.
func (r *Run) Strays() ([]string, error) {
	pids, err := userProcesses(r.user.owns)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, pid := range pids {
		cg, err := cgroupOf(pid)
		if err != nil || cg == r.cgroup.rel || strings.HasPrefix(cg, r.cgroup.rel+"/") {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "comm"))
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
			return out, fmt.Errorf("kill process %d of the runner user outside the run's cgroup: %w", pid, err)
		}
		out = append(out, fmt.Sprintf("process %d (%s) in cgroup %s", pid, strings.TrimSpace(string(comm)), cg))
	}
	return out, nil
}

// cgroupOf returns the cgroup v2 path of process pid.
func cgroupOf(pid int) (string, error) {
	f, err := os.Open(filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	return ownCgroup(f)
}
