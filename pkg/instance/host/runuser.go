package host

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/hangar-ci/hangar/pkg/instance/runas"
)

// runnerUser is the unprivileged user runs run as.
type runnerUser struct {
	name     string
	uid, gid int
	groups   []uint32
	home     string // "" when the user has no home of its own
	// subUIDs are the user's subordinate uids (/etc/subuid): only when the pool allows user
	// namespaces, else the agent refuses to serve.
	subUIDs []idRange
}

// owns reports whether a process or file of uid is the runner user's: its own uid or one of its
// subordinate uids.
func (u *runnerUser) owns(uid int) bool {
	if uid == u.uid {
		return true
	}
	for _, r := range u.subUIDs {
		if r.contains(uid) {
			return true
		}
	}
	return false
}

// lookupRunnerUser resolves the runner user. The agent runs as root (it kills the user's
// processes and removes its files after every run), so the runner user must be another,
// unprivileged one: root, the agent's own user ("self" included) and a missing user are errors.
func lookupRunnerUser(name string, sudo bool) (*runnerUser, error) {
	if name == "" || name == "self" {
		return nil, fmt.Errorf("run-as %q: want the unprivileged user the runner runs as (the pool's runner.user); the agent's own user may not run jobs", name)
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("run-as %q: no such user on this instance (the image or user data must create it): %w", name, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, fmt.Errorf("run-as %q: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, fmt.Errorf("run-as %q: gid %q: %w", name, u.Gid, err)
	}
	if uid == 0 || gid == 0 {
		return nil, fmt.Errorf("run-as %q resolves to uid %d, gid %d: the runner must not run as root", name, uid, gid)
	}
	if uid == os.Geteuid() {
		return nil, fmt.Errorf("run-as %q is the agent's own user: the runner must run as another, unprivileged user", name)
	}
	r := &runnerUser{name: name, uid: uid, gid: gid, home: u.HomeDir}
	ids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("run-as %q: read its groups (to refuse a root-equivalent one): %w", name, err)
	}
	var names []string
	for _, g := range ids {
		if n, err := strconv.Atoi(g); err == nil && n != gid {
			if n == 0 {
				return nil, fmt.Errorf("run-as %q is in group root: the runner must be unprivileged", name)
			}
			r.groups = append(r.groups, uint32(n))
		}
		grp, err := user.LookupGroupId(g)
		if err != nil {
			return nil, fmt.Errorf("run-as %q: look up its group %s: %w", name, g, err)
		}
		names = append(names, grp.Name)
	}
	if err := refuseRootGroups(name, names, sudo); err != nil {
		return nil, err
	}
	if !ownHome(r.home) {
		r.home = ""
	}
	return r, nil
}

// rootEquivalentGroups are the groups whose members can become root (sudo rules, the Docker
// socket, disk devices) on the images Hangar targets.
var rootEquivalentGroups = map[string]bool{"sudo": true, "wheel": true, "admin": true, "docker": true, "disk": true, "lxd": true}

// refuseRootGroups refuses a runner user in a root-equivalent group unless the pool declares
// runner.sudo.
func refuseRootGroups(user string, groups []string, sudo bool) error {
	if sudo {
		return nil
	}
	for _, g := range groups {
		if rootEquivalentGroups[g] {
			return fmt.Errorf("run-as %q is in group %s, which makes it root-equivalent: set the pool's runner.sudo (reuse is then limited to repository or never), or take the user out of the group", user, g)
		}
	}
	return nil
}

// ownHome reports whether home is a directory the user may have to itself (not /, not a system
// directory, not a placeholder such as /nonexistent).
func ownHome(home string) bool {
	if !filepath.IsAbs(home) {
		return false
	}
	switch filepath.Clean(home) {
	case "/", "/root", "/nonexistent", "/var/empty", "/dev/null", "/bin", "/usr", "/var", "/tmp", "/home", "/opt":
		return false
	}
	return true
}

func (u *runnerUser) credential() *syscall.Credential {
	return &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid), Groups: u.groups}
}

// runas is who the helper's ExecCommand becomes.
func (u *runnerUser) runas() runas.User {
	return runas.User{UID: u.uid, GID: u.gid, Groups: u.groups}
}

func (u *runnerUser) env() []string {
	home := u.home
	if home == "" {
		home = "/"
	}
	return []string{"HOME=" + home, "USER=" + u.name, "LOGNAME=" + u.name,
		"PATH=" + RootPATH}
}

// skelDir is copied into a fresh home (a variable for tests).
var skelDir = "/etc/skel"

// resetHome removes the user's home (without following symlinks) and makes it anew from the
// skeleton, owned by the user.
func (u *runnerUser) resetHome() error {
	if u.home == "" {
		return nil
	}
	if err := removeTree(u.home); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(u.home), 0o755); err != nil {
		return fmt.Errorf("make %s: %w", filepath.Dir(u.home), err)
	}
	if err := os.Mkdir(u.home, 0o750); err != nil {
		return fmt.Errorf("make home %s: %w", u.home, err)
	}
	if err := os.Lchown(u.home, u.uid, u.gid); err != nil {
		return fmt.Errorf("make home %s: %w", u.home, err)
	}
	if _, err := os.Stat(skelDir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return copyTree(skelDir, u.home, u.uid, u.gid)
}
