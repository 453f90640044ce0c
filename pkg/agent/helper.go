package agent

import (
	"os"
	"path/filepath"
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
