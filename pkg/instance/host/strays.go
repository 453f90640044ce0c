package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Strays kills every process of the runner user (or its subordinate uids) that is outside the
// run's cgroup, and describes each: it escaped the run's containment (a session some service of
// the image gave the user, or a way in not closed yet), and runs without the helper's filter or
// the firewall's cgroup match. Each is recorded on the host too, so that the run's Scrub fails:
// an instance whose containment failed serves no other run. Call it while the run runs;
// processes that end meanwhile are skipped. A process is held by a pidfd while it is looked at
// and killed, so a pid reused meanwhile is never killed for another's sake.
func (r *Run) Strays() ([]string, error) {
	pids, err := userProcesses(r.user.owns)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, pid := range pids {
		s, err := r.stray(pid)
		if err != nil {
			return out, err
		}
		if s != "" {
			out = append(out, s)
			if r.escaped != nil {
				r.escaped(s)
			}
		}
	}
	return out, nil
}

// stray kills process pid if it is the runner user's and outside the run's cgroup, and
// describes it ("" when it is not a stray, or is gone).
func (r *Run) stray(pid int) (string, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return "", nil // gone
	}
	defer func() { _ = unix.Close(fd) }()
	// Read through /proc after the pidfd holds the process: what is read is that process's.
	if mine, err := processOf(pid, r.user.owns); err != nil || !mine {
		return "", nil
	}
	cg, err := cgroupOf(pid)
	if err != nil || cg == r.cgroup.rel || strings.HasPrefix(cg, r.cgroup.rel+"/") {
		return "", nil
	}
	comm, _ := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "comm"))
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return "", fmt.Errorf("kill process %d of the runner user outside the run's cgroup: %w", pid, err)
	}
	return fmt.Sprintf("process %d (%s) in cgroup %s", pid, strings.TrimSpace(string(comm)), cg), nil
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
