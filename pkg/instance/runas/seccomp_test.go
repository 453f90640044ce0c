package runas

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// runBPF interprets the few classic BPF instructions the filter uses over a seccomp_data.
func runBPF(t *testing.T, prog []unix.SockFilter, nr, arch, arg0 uint32) uint32 {
	t.Helper()
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			switch in.K {
			case seccompNr:
				a = nr
			case seccompArchOff:
				a = arch
			case seccompArg0:
				a = arg0
			default:
				t.Fatalf("load of offset %d", in.K)
			}
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
			a &= in.K
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			if a == in.K {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			if a&in.K != 0 {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_RET | unix.BPF_K:
			return in.K
		default:
			t.Fatalf("instruction %#x", in.Code)
		}
	}
	t.Fatal("ran off the end of the filter")
	return 0
}

func TestUserNamespaceFilter(t *testing.T) {
	t.Parallel()
	eperm := unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	enosys := unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	for _, goarch := range []string{"amd64", "arm64"} {
		arches, err := seccompArches(goarch)
		require.NoError(t, err)
		prog := userNamespaceFilter(arches)
		for _, a := range arches {
			cases := []struct {
				name          string
				nr, arg0, ret uint32
			}{
				{"unshare(CLONE_NEWUSER)", a.unshare, unix.CLONE_NEWUSER, eperm},
				{"unshare(CLONE_NEWUSER|CLONE_NEWNS)", a.unshare, unix.CLONE_NEWUSER | unix.CLONE_NEWNS, eperm},
				{"unshare(CLONE_NEWNS)", a.unshare, unix.CLONE_NEWNS, allow},
				{"clone(CLONE_NEWUSER)", a.clone, unix.CLONE_NEWUSER | 17, eperm},
				{"clone(a thread)", a.clone, unix.CLONE_VM | unix.CLONE_THREAD, allow},
				{"clone3", a.clone3, 0, enosys},
				{"another call", 1, unix.CLONE_NEWUSER, allow},
			}
			if a.audit == unix.AUDIT_ARCH_X86_64 {
				cases = append(cases, struct {
					name          string
					nr, arg0, ret uint32
				}{"x32 unshare(CLONE_NEWUSER)", a.unshare | 0x40000000, unix.CLONE_NEWUSER, eperm})
			}
			for _, tc := range cases {
				require.Equal(t, tc.ret, runBPF(t, prog, tc.nr, a.audit, tc.arg0), "%s %#x: %s", goarch, a.audit, tc.name)
			}
		}
		require.Equal(t, uint32(unix.SECCOMP_RET_KILL_PROCESS), runBPF(t, prog, 1, 0x1234, 0), "%s: an unknown ABI", goarch)
	}
	_, err := seccompArches("riscv64")
	require.ErrorContains(t, err, "riscv64")
}
