//go:build !linux

package fleetsim

import (
	"errors"
	"syscall"
)

// procAttr: outside Linux there is no parent-death signal; children outlive a simulator that
// dies without stopping them.
func procAttr(pgid bool, _ syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: pgid}
}

// becomeSubreaper: outside Linux orphans go to init, out of the shim's reach.
func becomeSubreaper() error { return nil }

// childrenOf: outside Linux the shim only reaps what is already its own.
func childrenOf(int) []int { return nil }

// ProcessesUnder: outside Linux there is no /proc to look in; it reports nothing.
func ProcessesUnder(string) []string { return nil }

// newCgroupBase: outside Linux there are no cgroups v2; agents cannot contain their runs.
func newCgroupBase() (mount, base string, err error) {
	return "", "", errors.New("fleetsim: cgroups v2 are Linux's: the agents contain their runs in them")
}

func removeCgroupTree(string, string) error { return nil }

// cpuShimEnv, newCPUGroup, joinCPUGroup, removeCPUGroup: outside Linux the instances share the
// CPU at full weight.
const cpuShimEnv = "HANGAR_FLEETSIM_CPU_CGROUP"

func newCPUGroup(string, int) (string, error) { return "", nil }
func joinCPUGroup(string) error               { return nil }
func removeCPUGroup(string) error             { return nil }

// ownMounts: outside Linux there are no mount namespaces.
func ownMounts(*syscall.SysProcAttr) {}

// hidePaths: outside Linux nothing can be hidden from the agent.
func hidePaths([]string) error {
	return errors.New("fleetsim: hiding files needs Linux's mount namespaces")
}
