package runas

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Unless the pool opts into user namespaces (runner.userNamespaces), the runner's processes may
// not make one: in a user namespace a job maps itself to any uid of the user's subordinate
// ranges, or gains the capabilities that the kernel's less-audited interfaces (network, mount)
// open to a namespace's root. The filter below, installed by the agent (as root, so without
// no_new_privs: setuid programs such as sudo keep working) just before it becomes the runner
// user and starts a runner script, refuses:
//
//   - unshare and clone with CLONE_NEWUSER: EPERM, as on a machine where unprivileged user
//     namespaces are off;
//   - clone3 (whose flags sit in memory a filter cannot read): ENOSYS, on which the C library
//     and Go fall back to clone, which is then checked.
//
// Every architecture a process of the machine can make system calls in is listed (a 64-bit
// machine runs 32-bit programs too); a system call from any other is killed.

// seccompArch is one system call ABI: its audit architecture and its numbers for the calls the
// filter checks. mask is and-ed with the number first (x86-64's x32 calls set bit 30).
type seccompArch struct {
	audit                  uint32
	mask                   uint32
	unshare, clone, clone3 uint32
}

// seccompArches returns the ABIs of the machine's architecture.
func seccompArches(goarch string) ([]seccompArch, error) {
	switch goarch {
	case "amd64":
		return []seccompArch{
			{audit: unix.AUDIT_ARCH_X86_64, mask: ^uint32(0x40000000), unshare: 272, clone: 56, clone3: 435},
			{audit: unix.AUDIT_ARCH_I386, mask: ^uint32(0), unshare: 310, clone: 120, clone3: 435},
		}, nil
	case "arm64":
		return []seccompArch{
			{audit: unix.AUDIT_ARCH_AARCH64, mask: ^uint32(0), unshare: 97, clone: 220, clone3: 435},
			{audit: unix.AUDIT_ARCH_ARM, mask: ^uint32(0), unshare: 337, clone: 120, clone3: 435},
		}, nil
	}
	return nil, fmt.Errorf("no system call filter for %s: user namespaces cannot be refused to the runner", goarch)
}

// Offsets in struct seccomp_data; the flags are the first argument's low word (little endian).
const (
	seccompNr      = 0
	seccompArchOff = 4
	seccompArg0    = 16
)

// bpf instruction helpers.
func bpfStmt(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
func bpfJump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

// userNamespaceFilter builds the filter described above.
func userNamespaceFilter(arches []seccompArch) []unix.SockFilter {
	const (
		ld    = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jset  = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		and   = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
		ret   = unix.BPF_RET | unix.BPF_K
		allow = unix.SECCOMP_RET_ALLOW
	)
	eperm := unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	enosys := unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	// Each architecture's block: load the number, then
	//   clone3 -> ENOSYS; unshare or clone -> check the flags; anything else -> allow.
	block := func(a seccompArch) []unix.SockFilter {
		return []unix.SockFilter{
			bpfStmt(ld, seccompNr),
			bpfStmt(and, a.mask),
			bpfJump(jeq, a.clone3, 0, 1),
			bpfStmt(ret, enosys),
			bpfJump(jeq, a.unshare, 1, 0),
			bpfJump(jeq, a.clone, 0, 3),
			bpfStmt(ld, seccompArg0),
			bpfJump(jset, unix.CLONE_NEWUSER, 0, 1),
			bpfStmt(ret, eperm),
			bpfStmt(ret, allow),
		}
	}
	prog := []unix.SockFilter{bpfStmt(ld, seccompArchOff)}
	// The dispatch: one test per architecture jumping to its block, then a kill.
	blockLen := len(block(seccompArch{}))
	n := len(arches)
	for i, a := range arches {
		// From test i, the blocks start after the remaining tests and the kill.
		skip := (n - 1 - i) + 1 + i*blockLen
		prog = append(prog, bpfJump(jeq, a.audit, uint8(skip), 0))
	}
	prog = append(prog, bpfStmt(ret, unix.SECCOMP_RET_KILL_PROCESS))
	for _, a := range arches {
		prog = append(prog, block(a)...)
	}
	return prog
}

// denyUserNamespaces installs the filter on every thread of the calling process; it needs
// CAP_SYS_ADMIN (the agent is root) since no_new_privs is left off.
func denyUserNamespaces() error {
	arches, err := seccompArches(runtime.GOARCH)
	if err != nil {
		return err
	}
	filter := userNamespaceFilter(arches)
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("install the system call filter refusing user namespaces: %w", errno)
	}
	runtime.KeepAlive(filter)
	return nil
}
