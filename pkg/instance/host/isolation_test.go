package host

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
)

// unitUser is the test bed's user for these tests (scripts/testbed.sh creates it; no simulated
// instance uses it, so killing its processes reaches no other test).
func unitUser(t *testing.T) *runnerUser {
	t.Helper()
	testbed.RequireRoot(t, "runs processes as the test bed's hangar-unit user")
	u, err := lookupRunnerUser("hangar-unit", false)
	require.NoError(t, err, "make testbed-up creates the user")
	return u
}

func TestLookupRunnerUser(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, want string }{
		{"", "want the unprivileged user"},
		{"self", "the agent's own user may not run jobs"},
		{"root", "must not run as root"},
		{"no-such-user-here", "no such user on this instance"},
	} {
		_, err := lookupRunnerUser(tc.name, false)
		require.ErrorContains(t, err, tc.want, tc.name)
	}
}

// TestKillUserEndsEscapedProcesses: processes that left their group and session, and their
// children, all end; none of another user is touched.
func TestKillUserEndsEscapedProcesses(t *testing.T) {
	u := unitUser(t)
	bystander := exec.Command("sleep", "60")
	require.NoError(t, bystander.Start())
	t.Cleanup(func() { _ = bystander.Process.Kill(); _ = bystander.Wait() })

	cmd := exec.Command("sh", "-c", `setsid sh -c 'sleep 600 & exec sleep 601' </dev/null >/dev/null 2>&1 &
sh -c 'sh -c "exec sleep 602" &' </dev/null >/dev/null 2>&1; exec sleep 603`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.credential(), Setpgid: true}
	require.NoError(t, cmd.Start())
	go func() { _ = cmd.Wait() }()
	require.Eventually(t, func() bool {
		pids, err := userProcesses(u.owns)
		return err == nil && len(pids) >= 4
	}, time.Minute, 20*time.Millisecond, "the user's processes start")

	require.NoError(t, killUser(context.Background(), u.owns))
	pids, err := userProcesses(u.owns)
	require.NoError(t, err)
	require.Empty(t, pids)
	require.NoError(t, bystander.Process.Signal(syscall.Signal(0)), "another user's process lives on")
	require.ErrorContains(t, killUser(context.Background(), func(uid int) bool { return uid == 0 }), "refusing")
}

// TestRemoveOwned: the user's files and directories in a shared temporary directory go, its
// symlinks go without their targets, and nobody else's files are touched.
func TestRemoveOwned(t *testing.T) {
	u := unitUser(t)
	tmp := t.TempDir()
	require.NoError(t, os.Chmod(tmp, 0o1777))
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o644))
	mine := func(p string) { require.NoError(t, os.Lchown(p, u.uid, u.gid)) }

	require.NoError(t, os.WriteFile(filepath.Join(tmp, "theirs"), []byte("x"), 0o644))
	mine(filepath.Join(tmp, "theirs"))
	require.NoError(t, os.MkdirAll(filepath.Join(tmp, "dir", "sub"), 0o755))
	mine(filepath.Join(tmp, "dir"))
	require.NoError(t, os.Symlink(outside, filepath.Join(tmp, "link")))
	mine(filepath.Join(tmp, "link"))
	require.NoError(t, os.Mkdir(filepath.Join(tmp, "shared"), 0o755))
	require.NoError(t, os.Chmod(filepath.Join(tmp, "shared"), 0o1777)) // like /tmp/.X11-unix
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "shared", "theirs"), []byte("x"), 0o644))
	mine(filepath.Join(tmp, "shared", "theirs"))
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "roots"), []byte("x"), 0o644))

	require.NoError(t, removeOwned(tmp, u.owns))
	for _, gone := range []string{"theirs", "dir", "link", "shared/theirs"} {
		_, err := os.Lstat(filepath.Join(tmp, gone))
		require.True(t, os.IsNotExist(err), "%s was left", gone)
	}
	require.FileExists(t, filepath.Join(tmp, "roots"))
	require.DirExists(t, filepath.Join(tmp, "shared"))
	require.FileExists(t, filepath.Join(outside, "keep"), "a symlink's target is not followed")
	require.NoError(t, removeOwned(filepath.Join(tmp, "missing"), u.owns), "a missing directory is fine")
	require.Error(t, removeOwned(filepath.Join(tmp, "roots"), u.owns), "a file in place of a directory is a failure")
}

// TestRemoveTreeDoesNotFollowSymlinks: a symlink in place of the tree, or inside it, is removed
// as a link.
func TestRemoveTreeDoesNotFollowSymlinks(t *testing.T) {
	t.Parallel()
	base, outside := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(base, "work")))
	require.NoError(t, removeTree(filepath.Join(base, "work")))
	require.NoDirExists(t, filepath.Join(base, "work"))
	require.NoError(t, os.MkdirAll(filepath.Join(base, "run", "a"), 0o755))
	require.NoError(t, os.Symlink(outside, filepath.Join(base, "run", "a", "out")))
	require.NoError(t, removeTree(filepath.Join(base, "run")))
	require.NoDirExists(t, filepath.Join(base, "run"))
	require.FileExists(t, filepath.Join(outside, "keep"))
}

// TestRemoveLeftovers: System V IPC objects a run made outlive its processes; they go.
func TestRemoveLeftovers(t *testing.T) {
	u := unitUser(t)
	for _, kind := range []string{"--shmem=4096", "--queue", "--semaphore=1"} {
		cmd := exec.Command("ipcmk", kind)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.credential()}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	for _, kind := range sysvIPC {
		ids, err := ipcOwnedBy(filepath.Join(sysvIPCDir, kind.file), kind.idColumn, u.owns)
		require.NoError(t, err)
		require.NotEmpty(t, ids, kind.file)
	}
	ipcrm, err := resolveTool("ipcrm", u)
	require.NoError(t, err)
	require.NoError(t, removeLeftovers(context.Background(), u, tools{ipcrm: ipcrm}))
	for _, kind := range sysvIPC {
		ids, err := ipcOwnedBy(filepath.Join(sysvIPCDir, kind.file), kind.idColumn, u.owns)
		require.NoError(t, err)
		require.Empty(t, ids, "%s objects of the run are left", kind.file)
	}
}

// TestCleanDocker: with a Docker daemon, every container goes (volumes with them), then whatever
// nothing uses; without a daemon, or without Docker, there is nothing to do; a failing command
// is a failed cleanup.
func TestCleanDocker(t *testing.T) {
	t.Parallel()
	fake := func(t *testing.T, script string) (string, string) {
		dir := t.TempDir()
		calls := filepath.Join(dir, "calls")
		bin := filepath.Join(dir, "docker")
		require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\necho \"$*\" >> "+calls+"\n"+script), 0o755))
		return bin, calls
	}
	read := func(p string) string { b, _ := os.ReadFile(p); return string(b) }
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	bin, calls := fake(t, `case "$1" in ps) echo c1; echo c2;; esac`)
	require.NoError(t, cleanDocker(context.Background(), bin, log))
	require.Equal(t, "info --format {{.ID}}\nps -aq\nrm -f -v c1 c2\nsystem prune --all --volumes --force\n", read(calls))

	bin, calls = fake(t, `[ "$1" = info ] && exit 1; exit 0`)
	require.NoError(t, cleanDocker(context.Background(), bin, log), "no daemon: nothing to clean")
	require.Equal(t, "info --format {{.ID}}\n", read(calls))

	bin, _ = fake(t, `case "$1" in ps) echo c1;; rm) echo busy >&2; exit 1;; esac`)
	require.ErrorContains(t, cleanDocker(context.Background(), bin, log), "rm -f -v c1")

	require.NoError(t, cleanDocker(context.Background(), "", log), "no Docker at all")
}
