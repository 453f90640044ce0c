package runas

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// ClearKeyringsCommand clears the calling user's kernel keyrings: the agent starts it as the
// runner user after each run.
const ClearKeyringsCommand = "clear-keyrings"

// ClearKeyringsMain clears the user, user-session and persistent keyrings of the calling user
// and returns the process exit status.
func ClearKeyringsMain() int {
	if err := clearOwnKeyrings(); err != nil {
		fmt.Fprintln(os.Stderr, "hangar-runas "+ClearKeyringsCommand+":", err)
		return 1
	}
	return 0
}

// clearOwnKeyrings clears the calling user's user, user-session and persistent keyrings. A kernel
// without persistent keyrings has none to clear.
//
// It runs on one OS thread throughout: the persistent keyring is cleared by possession, through
// the process keyring it is linked into, and the kernel installs a new process keyring in the
// credentials of the calling thread alone, so a call from another thread of the process would
// not possess it (EACCES).
func clearOwnKeyrings() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, ring := range []struct {
		name string
		id   int
	}{{"user", unix.KEY_SPEC_USER_KEYRING}, {"user-session", unix.KEY_SPEC_USER_SESSION_KEYRING}} {
		if _, err := unix.KeyctlInt(unix.KEYCTL_CLEAR, ring.id, 0, 0, 0); err != nil {
			return fmt.Errorf("clear the %s keyring: %w", ring.name, err)
		}
	}
	id, err := unix.KeyctlInt(unix.KEYCTL_GET_PERSISTENT, os.Getuid(), unix.KEY_SPEC_PROCESS_KEYRING, 0, 0)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("find the persistent keyring: %w", err)
	}
	if _, err := unix.KeyctlInt(unix.KEYCTL_CLEAR, id, 0, 0, 0); err != nil {
		return fmt.Errorf("clear the persistent keyring: %w", err)
	}
	return nil
}
