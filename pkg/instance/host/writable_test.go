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

	found, err := findWritable(root, u, []string{filepath.Join(root, "skipped"), filepath.Join(root, "roots", "skippedtoo")})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{owned, world, worldIn, group}, found)
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
