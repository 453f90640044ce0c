package fleetsim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// The simulated instances stand for machines of their own: on AWS an instance's boot and its
// runs take its own CPUs, never those of the control plane or of AWS's services. On the test
// bed's two shared cores forty of them (each agent walking the file system as it starts, every
// run scrubbed after its job) would set the pace of the emulators and of the control plane a
// benchmark measures, so there (Config.CPUShares) their processes run in a cgroup of lower CPU
// weight: they have the CPU whenever the others leave it, and a share of it when both want it.
// Tests leave them at full weight: under a lower one, a busy machine could starve an agent past
// the fixed timeouts of the instance it stands for.

// cpuShimEnv names the cgroup an agent's shim joins before it starts the agent.
const cpuShimEnv = "HANGAR_FLEETSIM_CPU_CGROUP"

// cpuMountPoint finds the mount of cgroup v1's cpu controller ("" when none is mounted: the
// instances then share the CPU at full weight).
func cpuMountPoint() (string, error) {
	return mountPoint(func(fsType string, opts []string) bool { return fsType == "cgroup" && slices.Contains(opts, "cpu") })
}

// newCPUGroup makes the simulator's cgroup of CPU weight shares (cgroup v1 cpu.shares), named
// as its cgroup v2 base is, after removing those of simulators whose process is gone. It returns
// "" when there is no cgroup v1 cpu controller to make it in.
func newCPUGroup(base string, shares int) (string, error) {
	mount, err := cpuMountPoint()
	if err != nil || mount == "" {
		return "", err
	}
	parent := filepath.Join(mount, cgroupSimDir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("make %s: %w", parent, err)
	}
	removeStale(parent, func(dir string) { _ = os.Remove(dir) })
	dir := filepath.Join(parent, filepath.Base(base))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("make the instances' cpu cgroup %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.shares"), []byte(strconv.Itoa(shares)), 0o644); err != nil {
		_ = os.Remove(dir)
		return "", fmt.Errorf("weigh the instances' cpu cgroup %s: %w", dir, err)
	}
	return dir, nil
}

// joinCPUGroup moves the calling process into the cgroup dir; what it starts afterwards is born
// there.
func joinCPUGroup(dir string) error {
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// removeCPUGroup removes the cgroup dir once every process in it has ended ("" and a missing dir
// are fine).
func removeCPUGroup(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the instances' cpu cgroup: %w", err)
	}
	return nil
}
