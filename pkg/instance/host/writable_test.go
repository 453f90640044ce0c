package host

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
)

// TestFindWritable: the walk lists the directories the runner user owns or may write to, as far
// as it can reach, outside the skipped trees; not what it owns inside one listed already.
func TestFindWritable(t *testing.T) {
	t.Parallel()
	testbed.RequireRoot(t, "gives directories to other users")
	u := &runnerUser{name: "runner", uid: 54321, gid: 54321, groups: []uint32{54400}}
	root := t.TempDir()
	require.NoError(t, os.Chmod(root, 0o755))
	mk := func(rel string, mode os.FileMode, uid, gid int) string {
		p := filepath.Join(root, rel)
		require.NoError(t, os.Mkdir(p, mode))
		require.NoError(t, os.Chmod(p, mode))
		require.NoError(t, os.Lchown(p, uid, gid))
		return p
	}
	mk("roots", 0o755, 0, 0)
	owned := mk("owned", 0o755, u.uid, u.gid)
	mk("owned/inner", 0o755, u.uid, u.gid)
	world := mk("world", 0o777, 0, 0)
	worldIn := mk("world/other", 0o777, 1234, 1234)
	mk("closed", 0o700, 0, 0)
	mk("closed/open", 0o777, 0, 0)
	group := mk("group", 0o770, 0, 54400)
	mk("groupread", 0o750, 0, 54400)
	mk("ownedreadonly", 0o555, u.uid, u.gid)
	mk("skipped", 0o777, 0, 0)
	mk("roots/skippedtoo", 0o777, 0, 0)
	require.NoError(t, os.WriteFile(filepath.Join(root, "roots", "file"), nil, 0o666))
	require.NoError(t, os.Chmod(filepath.Join(root, "roots", "file"), 0o666)) // past the umask
	require.NoError(t, os.WriteFile(filepath.Join(root, "roots", "readonly"), nil, 0o644))
	mine := filepath.Join(root, "roots", "mine")
	require.NoError(t, os.WriteFile(mine, nil, 0o444))
	require.NoError(t, os.Lchown(mine, u.uid, u.gid))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(root, "roots", "link")))

	found, err := findWritable(root, u, []string{filepath.Join(root, "skipped"), filepath.Join(root, "roots", "skippedtoo")})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{owned, world, worldIn, group, filepath.Join(root, "ownedreadonly")}, found.writable,
		"one it owns it may make writable")
	require.ElementsMatch(t, []string{filepath.Join(root, "roots", "file"), mine}, found.files,
		"files it may write or owns, not only directories; not a link, nor one it may only read")
	require.Contains(t, found.dirs, filepath.Join(root, "roots"), "every directory it can reach is stamped")
	require.NotContains(t, found.dirs, filepath.Join(root, "closed", "open"), "nor what it cannot reach")
}

// TestNoFilesLeftOutsideTheSweeps: after a run, an entry of the runner user that turned up
// outside the swept directories (in a directory a privileged service made or wrote in for it)
// fails the check; its own in a swept directory does not, nor anything in an unchanged one.
func TestNoFilesLeftOutsideTheSweeps(t *testing.T) {
	testbed.RequireRoot(t, "gives files to another user")
	u, err := lookupRunnerUser("hangar-unit", false)
	require.NoError(t, err)
	root := t.TempDir()
	require.NoError(t, os.Chmod(root, 0o755))
	for _, d := range []string{"etc", "var/lib/crash", "swept"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	swept := filepath.Join(root, "swept")
	require.NoError(t, os.Chmod(swept, 0o777))
	h := &Host{user: u, log: slog.New(slog.DiscardHandler)}
	require.NoError(t, h.findSweepDirs(root))
	require.Equal(t, []string{swept}, h.sweepDirs)
	require.NoError(t, h.checkNoFilesLeft(), "nothing changed")

	give := func(p string) {
		require.NoError(t, os.WriteFile(p, []byte("SECRET"), 0o600))
		require.NoError(t, os.Lchown(p, u.uid, u.gid))
	}
	give(filepath.Join(swept, "the-runs-own")) // what its sweep removes
	require.NoError(t, h.checkNoFilesLeft())

	give(filepath.Join(root, "var", "lib", "crash", "core.1"))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc", "new", "deeper"), 0o755))
	give(filepath.Join(root, "etc", "new", "deeper", "report"))
	err = h.checkNoFilesLeft()
	require.ErrorContains(t, err, "the run left 2 files of the runner user outside its home and the swept directories")
	require.ErrorContains(t, err, filepath.Join(root, "var", "lib", "crash", "core.1"))
	require.ErrorContains(t, err, filepath.Join(root, "etc", "new", "deeper", "report"), "in a directory made since the walk")

	require.NoError(t, os.Remove(filepath.Join(root, "var", "lib", "crash", "core.1")))
	require.NoError(t, os.RemoveAll(filepath.Join(root, "etc", "new")))
	require.NoError(t, h.checkNoFilesLeft(), "gone again")

	shared := filepath.Join(root, "etc", "shared.db") // a service's, made writable to all meanwhile
	require.NoError(t, os.WriteFile(shared, nil, 0o666))
	require.NoError(t, os.Chmod(shared, 0o666))
	require.ErrorContains(t, h.checkNoFilesLeft(), shared+" (writable by the runner user)")
}

// TestInitRefusesFilesTheRunnerMayWrite: a file outside the swept directories that the runner
// user may write (or owns) would carry a run's leftovers to the next: init names it.
func TestInitRefusesFilesTheRunnerMayWrite(t *testing.T) {
	testbed.RequireRoot(t, "gives files to another user")
	u, err := lookupRunnerUser("hangar-unit", false)
	require.NoError(t, err)
	root := t.TempDir()
	require.NoError(t, os.Chmod(root, 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	conf := filepath.Join(root, "etc", "app.conf")
	require.NoError(t, os.WriteFile(conf, nil, 0o666))
	require.NoError(t, os.Chmod(conf, 0o666)) // past the umask
	h := &Host{user: u, log: slog.New(slog.DiscardHandler)}
	err = h.findSweepDirs(root)
	require.ErrorContains(t, err, "hangar-unit owns or may write to 1 files outside its home and the directories swept after every run ("+conf+")")
	require.NoError(t, os.Chmod(conf, 0o644))
	require.NoError(t, h.findSweepDirs(root))
}

// TestFindSweepDirsRefusals: a listed directory holding or lying in the agent's own directories
// or the user's home is refused, and so is a writable directory above the agent's own.
func TestFindSweepDirsRefusals(t *testing.T) {
	t.Parallel()
	testbed.RequireRoot(t, "gives directories to other users")
	root := t.TempDir()
	require.NoError(t, os.Chmod(root, 0o755))
	u := &runnerUser{name: "runner", uid: 54321, gid: 54321, home: filepath.Join(root, "home")}
	hostFor := func(listed ...string) *Host {
		state := filepath.Join(root, "state")
		h := &Host{cfg: Config{OwnDirs: []string{filepath.Join(state, "runner"), filepath.Join(state, "runs"), state}},
			log: slog.New(slog.DiscardHandler), user: u}
		h.cfg.Runner.WritableDirs = listed
		return h
	}
	for _, listed := range []string{filepath.Join(root, "state"), filepath.Join(root, "state", "runs", "x"), root, u.home} {
		err := hostFor(listed).findSweepDirs(filepath.Join(root, "empty"))
		require.ErrorContains(t, err, "which the agent manages itself", listed)
	}
	require.NoError(t, os.Lchown(root, u.uid, u.gid))
	err := hostFor().findSweepDirs(root)
	require.ErrorContains(t, err, "a run could move it")

	require.NoError(t, os.Lchown(root, 0, 0))
	h := hostFor("/srv/cache")
	require.NoError(t, h.findSweepDirs(root))
	require.Equal(t, []string{"/srv/cache"}, h.sweepDirs)
}

// TestMailboxRemovedAtInit: the runner user's own mailbox is removed (a run could leave something
// in it for the next); another user's stays.
func TestMailboxRemovedAtInit(t *testing.T) {
	testbed.RequireRoot(t, "gives files to another user")
	u, err := lookupRunnerUser("hangar-unit", false)
	require.NoError(t, err)
	dir := t.TempDir()
	old := mailSpools
	t.Cleanup(func() { mailSpools = old })
	mailSpools = []string{dir, filepath.Join(dir, "none")}
	mine, other := filepath.Join(dir, u.name), filepath.Join(dir, "someone")
	require.NoError(t, os.WriteFile(mine, []byte("left for the next run"), 0o660))
	require.NoError(t, os.Lchown(mine, u.uid, u.gid))
	require.NoError(t, os.WriteFile(other, nil, 0o660))
	require.NoError(t, removeMailSpool(u, slog.New(slog.DiscardHandler)))
	require.NoFileExists(t, mine)
	require.FileExists(t, other)
}
