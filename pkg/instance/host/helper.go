package host

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// HelperName is the helper binary's name (cmd/agent/runas) beside the agent's: the launch
// template's user data installs both so.
const HelperName = "hangar-runas"

// defaultHelper is hangar-runas beside the agent's binary self when it is there (a regular,
// executable file), else self: the agent's binary has the helper's commands too, hidden.
func defaultHelper(self string) string {
	p := filepath.Join(filepath.Dir(self), HelperName)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		return p
	}
	return self
}

// checkHelper refuses a helper that anyone but root could replace: the agent starts it as root,
// for every runner script. It must be a regular file owned by root and writable by no group or
// other user, in a directory of which the same holds unless it is sticky (whoever may rename in
// the directory may put another binary in its place).
func checkHelper(path string) error {
	for _, p := range []string{filepath.Dir(path), path} {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("helper %s: %w", path, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		switch {
		case p == path && !fi.Mode().IsRegular():
			return fmt.Errorf("helper %s: not a regular file", path)
		case !ok || st.Uid != 0:
			return fmt.Errorf("helper %s: %s is not root's; the agent starts the helper as root, so only root may replace it", path, p)
		case fi.Mode().Perm()&0o022 != 0 && (p == path || fi.Mode()&os.ModeSticky == 0): // a sticky directory keeps root's files root's
			return fmt.Errorf("helper %s: %s is writable by others (mode %s); the agent starts the helper as root, so only root may replace it", path, p, fi.Mode().Perm())
		}
	}
	return nil
}

// selfPath is the agent's own binary.
func selfPath() string {
	p, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return p
}
