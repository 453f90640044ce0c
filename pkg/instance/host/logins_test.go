package host

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
)

// setPath points a path variable at a test's own for the test's length.
func setPath(t *testing.T, v *string, p string) {
	old := *v
	t.Cleanup(func() { *v = old })
	*v = p
}

func TestNoLoginShell(t *testing.T) {
	dir := t.TempDir()
	setPath(t, &etcDir, dir)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "passwd"), []byte(
		"root:x:0:0:root:/root:/bin/bash\nrunner:x:1001:1001::/home/runner:/bin/bash\nlocked:x:1002:1002::/home/locked:/usr/sbin/nologin\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "shadow"), []byte(
		"root:*:19000:0:99999:7:::\nrunner:!:19000::::::\nlocked:!:19000::::::\nopen:$6$salt$hash:19000::::::\nempty::19000::::::\n"), 0o640))
	require.NoError(t, checkNoLogin(&runnerUser{name: "locked"}))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "passwd"), []byte(
		"locked:x:1002:1002::/home/locked:/usr/sbin/nologin\nopen:x:1003:1003::/home/open:/usr/sbin/nologin\nempty:x:1004:1004::/home/empty:/bin/false\nrunner:x:1001:1001::/home/runner:/bin/bash\n"), 0o644))
	for _, name := range []string{"open", "empty"} {
		require.ErrorContains(t, checkNoLogin(&runnerUser{name: name}), "has a password (or an empty one): su or a login would open a session beside the runs; lock it (passwd -l "+name+")", name)
	}
	err := checkNoLogin(&runnerUser{name: "runner"})
	require.ErrorContains(t, err, `run-as "runner" has the login shell "/bin/bash"`)
	require.ErrorContains(t, err, "usermod -s /usr/sbin/nologin runner", "the error says the fix")
	require.ErrorContains(t, checkNoLogin(&runnerUser{name: "ghost"}), "ghost is not in")
}

func TestDeniesUser(t *testing.T) {
	t.Parallel()
	const config = "port 22\ndenyusers someone runner\nallowusers *\n"
	require.True(t, deniesUser(config, "runner"))
	require.False(t, deniesUser(config, "run"), "a whole name, not a prefix")
	require.False(t, deniesUser("port 22\n", "runner"))
}

func TestClosePolkit(t *testing.T) {
	dir := t.TempDir()
	setPath(t, &polkitRules, filepath.Join(dir, "missing"))
	require.NoError(t, closePolkit(&runnerUser{name: "runner"}), "no polkit: nothing to do")
	require.NoDirExists(t, filepath.Join(dir, "missing"))

	setPath(t, &polkitRules, dir)
	require.NoError(t, closePolkit(&runnerUser{name: "runner"}))
	rule, err := os.ReadFile(filepath.Join(dir, "50-hangar-runner.rules"))
	require.NoError(t, err)
	require.Contains(t, string(rule), `subject.user == "runner"`)
	require.Contains(t, string(rule), `"org.freedesktop.login1."`, "lingering and sessions")
	require.Contains(t, string(rule), `"org.freedesktop.systemd1."`, "units, a user manager's among them")
	require.Contains(t, string(rule), "polkit.Result.NO")
}

func TestEndSessionsRemovesTheRuntimeDirectory(t *testing.T) {
	dir := t.TempDir()
	setPath(t, &userRuntime, dir)
	setPath(t, &systemdBooted, filepath.Join(dir, "no-systemd"))
	u := &runnerUser{name: "runner", uid: 4242}
	found, err := endSessions(context.Background(), "", u)
	require.NoError(t, err)
	require.Empty(t, found, "nothing there: nothing to report")

	run := filepath.Join(dir, strconv.Itoa(u.uid))
	require.NoError(t, os.MkdirAll(filepath.Join(run, "bus"), 0o700))
	require.NoError(t, os.Symlink("/etc", filepath.Join(run, "etc-link")))
	found, err = endSessions(context.Background(), "", u)
	require.NoError(t, err)
	require.Equal(t, []string{"its runtime directory " + run}, found)
	require.NoDirExists(t, run)
	require.FileExists(t, "/etc/passwd", "a symlink inside is removed, not followed")
}

// TestUserNamespacesRefusedOnlyWhenProved: Init writes the kernel's bound and then proves, as the
// runner user, that a user namespace is refused; a bound the kernel does not apply (here a file
// standing in for it) fails the proof.
func TestUserNamespacesRefusedOnlyWhenProved(t *testing.T) {
	testbed.RequireRoot(t, "runs unshare as the test bed's hangar-unit user")
	u, err := lookupRunnerUser("hangar-unit", false)
	require.NoError(t, err)
	unshare, err := resolveTool("unshare", u)
	require.NoError(t, err)
	bound := filepath.Join(t.TempDir(), "max_user_namespaces")
	setPath(t, &maxUserNamespaces, bound)

	proved, err := refuseUserNamespaces(context.Background(), "", u)
	require.NoError(t, err)
	require.False(t, proved, "without unshare there is no proof")
	b, err := os.ReadFile(bound)
	require.NoError(t, err)
	require.Equal(t, "0\n", string(b))

	_, err = refuseUserNamespaces(context.Background(), unshare, u)
	require.ErrorContains(t, err, "the kernel still lets hangar-unit make user namespaces")
}

// TestKernelTakenAndHeld: Init sets the kernel's core pattern (cores go nowhere) and hard link
// protection, proving each; after a run a changed one (or the user namespace bound) fails.
func TestKernelTakenAndHeld(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []*string{&corePattern, &protectedHardlinks, &maxUserNamespaces} {
		setPath(t, v, filepath.Join(dir, filepath.Base(*v)))
	}
	require.NoError(t, os.WriteFile(maxUserNamespaces, []byte("0\n"), 0o644))
	require.NoError(t, takeKernel())
	b, err := os.ReadFile(corePattern)
	require.NoError(t, err)
	require.Equal(t, "|/bin/false\n", string(b))
	h := &Host{}
	require.NoError(t, h.kernelHeld())
	require.NoError(t, os.WriteFile(protectedHardlinks, []byte("0\n"), 0o644))
	require.ErrorContains(t, h.kernelHeld(), "a kernel setting the agent made changed: "+protectedHardlinks+` is "0", not "1"`)
	require.NoError(t, os.WriteFile(protectedHardlinks, []byte("1\n"), 0o644))
	require.NoError(t, os.WriteFile(maxUserNamespaces, []byte("15000\n"), 0o644))
	require.ErrorContains(t, h.kernelHeld(), maxUserNamespaces)
	h.cfg.Runner.UserNamespaces = true
	require.NoError(t, h.kernelHeld(), "a pool that allows user namespaces leaves their bound")
	h.cfg.SharedKernel = true
	require.NoError(t, os.WriteFile(corePattern, []byte("core\n"), 0o644))
	require.NoError(t, h.kernelHeld(), "a shared kernel is not the agent's")
}
