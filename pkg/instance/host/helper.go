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
// for every runner script. It must be a regular file of root's, which only root can change
// (rootOwned: the file, every directory above it and every link on the way).
func checkHelper(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("helper %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("helper %s: not a regular file", path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 {
		return fmt.Errorf("helper %s: %s is not root's; the agent starts the helper as root, so only root may replace it", path, path)
	}
	if _, err := rootOwned(path, false, nil); err != nil {
		return fmt.Errorf("helper %s: %w; the agent starts the helper as root, so only root may replace it", path, err)
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
