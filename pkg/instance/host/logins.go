package host

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// One door in for the runner user: the runs the agent starts, in their cgroup and under the
// helper's filter. The user has no login shell, sshd refuses it, polkit refuses it logind's and
// systemd's actions (lingering, a user manager), and after each run logind ends what it may have
// of the user and its runtime directory is gone. Whatever of the user still turns up outside the
// run's cgroup during a run is reported and killed (Run.Strays).

// noLoginShells refuse a login: a session (ssh, su) starts nothing.
var noLoginShells = []string{"/usr/sbin/nologin", "/sbin/nologin", "/bin/false", "/usr/bin/false"}

// Paths of what closes the doors (variables for tests): sshd's and polkit's drop-in
// directories, logind's runtime directories, and systemd's mark that it is the init system.
var (
	sshdDropIns   = "/etc/ssh/sshd_config.d"
	sshdPrivsep   = "/run/sshd"
	polkitRules   = "/etc/polkit-1/rules.d"
	userRuntime   = "/run/user"
	systemdBooted = "/run/systemd/system"
)

// loginShell returns the user's shell as /etc/passwd (under etcDir) says.
func loginShell(name string) (string, error) {
	f, err := os.Open(filepath.Join(etcDir, "passwd"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) == 7 && fields[0] == name {
			return fields[6], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s is not in %s", name, filepath.Join(etcDir, "passwd"))
}

// checkNoLogin refuses a runner user whose shell would start a login session, or whose password
// (an empty one too) would let su or a PAM login open one, whatever its shell.
func checkNoLogin(u *runnerUser) error {
	shell, err := loginShell(u.name)
	if err != nil {
		return fmt.Errorf("run-as %q: read its login shell: %w", u.name, err)
	}
	if !slices.Contains(noLoginShells, shell) {
		return fmt.Errorf("run-as %q has the login shell %q: the runs the agent starts must be its only way in; give it /usr/sbin/nologin (usermod -s /usr/sbin/nologin %s)",
			u.name, shell, u.name)
	}
	hash, err := passwordField(u.name)
	if err != nil {
		return fmt.Errorf("run-as %q: read its password: %w", u.name, err)
	}
	if !strings.HasPrefix(hash, "!") && !strings.HasPrefix(hash, "*") {
		return fmt.Errorf("run-as %q has a password (or an empty one): su or a login would open a session beside the runs; lock it (passwd -l %s)", u.name, u.name)
	}
	return nil
}

// passwordField returns the user's password field in /etc/shadow (under etcDir).
func passwordField(name string) (string, error) {
	f, err := os.Open(filepath.Join(etcDir, "shadow"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Split(sc.Text(), ":"); len(fields) >= 2 && fields[0] == name {
			return fields[1], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s is not in %s", name, filepath.Join(etcDir, "shadow"))
}

// maskUserManager masks the runner user's systemd user manager and runtime directory units,
// when systemd runs: a session some PAM service opened anyway starts no manager (which would run
// units the user wrote in its home, unfiltered and outside the run's cgroup).
func maskUserManager(ctx context.Context, systemctl string, u *runnerUser) error {
	if systemctl == "" || !booted() {
		return nil
	}
	uid := strconv.Itoa(u.uid)
	if out, err := rootCommand(ctx, systemctl, "mask", "user@"+uid+".service", "user-runtime-dir@"+uid+".service").CombinedOutput(); err != nil {
		return fmt.Errorf("mask the runner user's user manager: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// dropInName is the file of the runner user's refusals in sshd's and polkit's drop-in
// directories: one per user, so that instances sharing /etc (the test bed) keep apart.
func dropInName(u *runnerUser, ext string) string { return "50-hangar-" + u.name + ext }

// closeSSH makes sshd refuse the runner user, when the instance has sshd: a job that adds a key
// to its own authorized_keys would otherwise start a session outside the run's cgroup and the
// helper's filter. The refusal is proved in the configuration sshd reads (sshd -T), and the
// running sshd reloaded when systemd runs it; an sshd whose configuration does not read the
// drop-in directory fails Init.
func closeSSH(ctx context.Context, sshd, systemctl string, u *runnerUser) error {
	if sshd == "" {
		return nil // no sshd on the instance
	}
	if err := os.MkdirAll(sshdDropIns, 0o755); err != nil {
		return fmt.Errorf("make %s: %w", sshdDropIns, err)
	}
	conf := filepath.Join(sshdDropIns, dropInName(u, ".conf"))
	if err := os.WriteFile(conf, []byte("# Hangar: the runs the agent starts are this user's only way in.\nDenyUsers "+u.name+"\n"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", conf, err)
	}
	// sshd -T wants its privilege separation directory, which its unit makes only while it runs.
	if err := os.MkdirAll(sshdPrivsep, 0o755); err != nil {
		return fmt.Errorf("make %s: %w", sshdPrivsep, err)
	}
	out, err := rootCommand(ctx, sshd, "-T", "-C", "user="+u.name+",host=localhost,addr=127.0.0.1").CombinedOutput()
	if err != nil {
		return fmt.Errorf("read sshd's configuration (sshd -T): %w: %s", err, strings.TrimSpace(string(out)))
	}
	if !deniesUser(string(out), u.name) {
		return fmt.Errorf("sshd's configuration does not read %s (no Include of it in sshd_config): add DenyUsers %s to sshd_config", conf, u.name)
	}
	if systemctl != "" && booted() {
		// sshd reads its configuration when it starts (socket-activated, per connection) or is
		// reloaded; one that is not running, or under another name, is no error.
		for _, unit := range []string{"ssh.service", "sshd.service"} {
			_ = rootCommand(ctx, systemctl, "try-reload-or-restart", unit).Run()
		}
	}
	return nil
}

// deniesUser reports whether sshd -T's output denies name.
func deniesUser(config, name string) bool {
	sc := bufio.NewScanner(strings.NewReader(config))
	for sc.Scan() {
		if users, ok := strings.CutPrefix(sc.Text(), "denyusers "); ok && slices.Contains(strings.Fields(users), name) {
			return true
		}
	}
	return false
}

// closePolkit makes polkit refuse the runner user every action of logind and systemd (lingering,
// sessions, starting units), when the instance has polkit's rules directory.
func closePolkit(u *runnerUser) error {
	if st, err := os.Stat(polkitRules); errors.Is(err, fs.ErrNotExist) || (err == nil && !st.IsDir()) {
		return nil // no polkit: nothing to ask it
	} else if err != nil {
		return fmt.Errorf("look for polkit's rules: %w", err)
	}
	rule := fmt.Sprintf(`// Hangar: the runs the agent starts are this user's only way in.
polkit.addRule(function(action, subject) {
    if (subject.user == %q &&
        (action.id.indexOf("org.freedesktop.login1.") == 0 || action.id.indexOf("org.freedesktop.systemd1.") == 0)) {
        return polkit.Result.NO;
    }
});
`, u.name)
	p := filepath.Join(polkitRules, dropInName(u, ".rules"))
	if err := os.WriteFile(p, []byte(rule), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// booted reports whether systemd is the init system (and so logind may run).
func booted() bool {
	_, err := os.Stat(systemdBooted)
	return err == nil
}

// endSessions ends whatever logind keeps of the runner user after a run: its sessions and user
// manager (loginctl terminate-user, when systemd runs), then its runtime directory, unmounted and
// removed if still there. It returns what it found to report.
func endSessions(ctx context.Context, loginctl string, u *runnerUser) ([]string, error) {
	var found []string
	if loginctl != "" && booted() {
		// Not logged in is the usual answer: the runs open no session.
		_ = rootCommand(ctx, loginctl, "terminate-user", strconv.Itoa(u.uid)).Run()
	}
	dir := filepath.Join(userRuntime, strconv.Itoa(u.uid))
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return found, nil
	}
	found = append(found, "its runtime directory "+dir)
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return found, fmt.Errorf("unmount %s: %w", dir, err)
	}
	return found, removeTree(dir)
}
