package fleetsim

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Each simulated instance gets a cgroup v2 root of its own, as systemd delegates one to the real
// agent (Delegate=yes): <cgroup2 mount>/hangar-sim/<pid>-<random>/<instance>, passed as
// --cgroup-root. When the instance ends, everything in it is killed and the cgroups are removed
// with the firewall rules that name them.

// cgroupSimDir is the directory below the cgroup2 mount holding every simulator's cgroups.
const cgroupSimDir = "hangar-sim"

// cgroupMountPoint finds the cgroup2 mount.
func cgroupMountPoint() (string, error) {
	mount, err := mountPoint(func(fsType string, _ []string) bool { return fsType == "cgroup2" })
	if err == nil && mount == "" {
		err = errors.New("no cgroup2 file system is mounted: the agents contain their runs in cgroups v2")
	}
	return mount, err
}

// mountPoint returns the first mount in /proc/self/mountinfo whose file system type and super
// options match ("" when none does).
func mountPoint(match func(fsType string, superOptions []string) bool) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		left, right, ok := strings.Cut(sc.Text(), " - ")
		fl, fr := strings.Fields(left), strings.Fields(right)
		if !ok || len(fl) < 5 || len(fr) < 1 {
			continue
		}
		var opts []string
		if len(fr) >= 3 {
			opts = strings.Split(fr[2], ",")
		}
		if match(fr[0], opts) {
			return fl[4], nil
		}
	}
	return "", sc.Err()
}

// removeStale removes, with remove, the directories in parent of simulators whose process is
// gone (named <pid>-<random>).
func removeStale(parent string, remove func(dir string)) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(strings.SplitN(e.Name(), "-", 2)[0])
		if err == nil && !processExists(pid) {
			remove(filepath.Join(parent, e.Name()))
		}
	}
}

// newCgroupBase makes this simulator's cgroup directory, after removing the empty ones of
// simulators whose process is gone.
func newCgroupBase() (mount, base string, err error) {
	mount, err = cgroupMountPoint()
	if err != nil {
		return "", "", err
	}
	parent := filepath.Join(mount, cgroupSimDir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", "", fmt.Errorf("make %s: %w", parent, err)
	}
	removeStale(parent, func(dir string) { _ = removeCgroupTree(mount, dir) })
	var b [4]byte
	_, _ = rand.Read(b[:])
	base = filepath.Join(parent, fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(b[:])))
	if err := os.Mkdir(base, 0o755); err != nil {
		return "", "", fmt.Errorf("make the simulator's cgroup %s: %w", base, err)
	}
	return mount, base, nil
}

func processExists(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// removeCgroupTree kills every process in dir and below it, waits until the kernel reports it
// empty, deletes the firewall rules naming any cgroup below it, and removes the cgroups, deepest
// first. A missing dir is fine.
func removeCgroupTree(mount, dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		return fmt.Errorf("kill cgroup %s: %w", dir, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for delay := 5 * time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil {
			return fmt.Errorf("read %s: %w", dir, err)
		}
		if strings.Contains(string(b), "populated 0") {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still holds processes 30s after it was killed", dir)
		}
		time.Sleep(delay) // a bounded wait on a kernel condition, no context to honour here
	}
	if rel, err := filepath.Rel(mount, dir); err == nil {
		clearFirewallMatching("/" + rel + "/") // iptables -S quotes the path
	}
	return removeCgroupsDeepestFirst(dir)
}

func removeCgroupsDeepestFirst(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			errs = append(errs, removeCgroupsDeepestFirst(filepath.Join(dir, e.Name())))
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dir, err))
	}
	return errors.Join(errs...)
}
