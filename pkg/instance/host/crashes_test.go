package host

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRemoveCrashes(t *testing.T) {
	dir := t.TempDir()
	cores, crash := filepath.Join(dir, "coredump"), filepath.Join(dir, "crash")
	setPath(t, &coredumpDir, cores)
	setPath(t, &crashDir, crash)
	owns := func(uid int) bool { return uid == 1001 }
	removed, err := removeCrashes(owns)
	require.NoError(t, err, "no crash handler: nothing to do")
	require.Empty(t, removed)

	require.NoError(t, os.MkdirAll(cores, 0o755))
	require.NoError(t, os.MkdirAll(crash, 0o755))
	mine := []string{
		filepath.Join(cores, "core.sh.1001.5e1f0a7b2c3d4e5f60718293a4b5c6d7.4242.1764400000000000.zst"),
		filepath.Join(cores, "core.my\\x2etool.1001.5e1f0a7b2c3d4e5f60718293a4b5c6d7.4243.1764400000000000"),
		filepath.Join(crash, "_usr_bin_python3.12.1001.crash"),
	}
	others := []string{
		filepath.Join(cores, "core.sshd.0.5e1f0a7b2c3d4e5f60718293a4b5c6d7.77.1764400000000000.zst"),
		filepath.Join(crash, "_usr_sbin_cron.0.crash"),
		filepath.Join(crash, "notes.txt"),
	}
	for _, f := range append(append([]string{}, mine...), others...) {
		require.NoError(t, os.WriteFile(f, []byte("SECRET=hunter2"), 0o640)) // root's, as the handlers leave them
	}
	removed, err = removeCrashes(owns)
	require.NoError(t, err)
	require.ElementsMatch(t, mine, removed, "the runner user's, by the uid in their names, whoever owns the files")
	for _, f := range others {
		require.FileExists(t, f, "another user's crash is not the run's")
	}
}

func TestRemoveUserJournals(t *testing.T) {
	dir := t.TempDir()
	persistent, volatile := filepath.Join(dir, "var", "0123abcd"), filepath.Join(dir, "run", "0123abcd")
	setPath(t, &systemdBooted, filepath.Join(dir, "no-systemd"))
	old := journalDirs
	t.Cleanup(func() { journalDirs = old })
	journalDirs = []string{filepath.Dir(persistent), filepath.Dir(volatile)}
	require.NoError(t, os.MkdirAll(persistent, 0o755))
	require.NoError(t, os.MkdirAll(volatile, 0o755))
	mine := []string{filepath.Join(persistent, "user-1001.journal"), filepath.Join(persistent, "user-1001@0005f1-0000.journal"),
		filepath.Join(volatile, "user-1001@0005f1-0001.journal~")}
	others := []string{filepath.Join(persistent, "system.journal"), filepath.Join(persistent, "user-10010.journal"),
		filepath.Join(persistent, "user-1000.journal")}
	for _, f := range append(append([]string{}, mine...), others...) {
		require.NoError(t, os.WriteFile(f, []byte("LPKSHHRH"), 0o640))
	}
	removed, err := removeUserJournals(context.Background(), "", 1001)
	require.NoError(t, err)
	require.ElementsMatch(t, mine, removed)
	for _, f := range others {
		require.FileExists(t, f)
	}
}
