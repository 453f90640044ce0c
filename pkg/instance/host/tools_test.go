package host

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/stretchr/testify/require"
)

// rootsPath sets rootPath to dirs for the test.
func rootsPath(t *testing.T, dirs ...string) {
	old := rootPath
	t.Cleanup(func() { rootPath = old })
	rootPath = strings.Join(dirs, string(os.PathListSeparator))
}

// program writes an executable script at p that leaves a mark beside itself when run.
func program(t *testing.T, p string) (mark string) {
	t.Helper()
	mark = p + ".ran"
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\ntouch "+mark+"\n"), 0o755))
	return mark
}

// TestPlantedProgramOnPathFailsInit: a directory on root's PATH that a run may write to fails
// the lookup of every program, before anything is run; a program found is the first on the path,
// every directory and link on the way checked.
func TestPlantedProgramOnPathFailsInit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("owners are checked against root; the agent runs as root")
	}
	base := t.TempDir()
	planted, good := filepath.Join(base, "planted"), filepath.Join(base, "sbin")
	require.NoError(t, os.Mkdir(planted, 0o755))
	require.NoError(t, os.Chmod(planted, 0o1777)) // like /tmp: sticky, and a run may add files
	require.NoError(t, os.Mkdir(good, 0o755))
	program(t, filepath.Join(planted, "ipcrm"))
	program(t, filepath.Join(good, "ipcrm"))
	program(t, filepath.Join(good, "iptables"))
	rootsPath(t, planted, good)

	_, err := resolveTools(Config{Iptables: "iptables", Docker: "docker"}, nil)
	require.ErrorContains(t, err, "PATH directory "+planted)
	require.ErrorContains(t, err, "writable by others")

	// The same directory without the plant's write access: the first ipcrm on the path is used.
	require.NoError(t, os.Chmod(planted, 0o755))
	got, err := resolveTools(Config{Iptables: "iptables", Docker: "docker"}, nil)
	require.NoError(t, err)
	require.Equal(t, tools{iptables: filepath.Join(good, "iptables"), ipcrm: filepath.Join(planted, "ipcrm")}, got,
		"docker, atq, atrm and ip6tables are not there: their steps are skipped")

	// iptables is required unless runs may reach the metadata endpoint.
	require.NoError(t, os.Remove(filepath.Join(good, "iptables")))
	_, err = resolveTools(Config{Iptables: "iptables", Docker: "docker"}, nil)
	require.ErrorContains(t, err, "program iptables: not on "+rootPath)
	_, err = resolveTools(Config{Iptables: "iptables", Docker: "docker", Runner: pooldoc.Runner{MetadataAccess: true}}, nil)
	require.NoError(t, err)
}

// TestInitRefusesAPlantedProgram: a directory on root's PATH a run may write to fails Init, and a
// host that did not initialise scrubs nothing: the ipcrm planted there never runs.
func TestInitRefusesAPlantedProgram(t *testing.T) {
	unitUser(t)
	planted := filepath.Join(t.TempDir(), "planted")
	require.NoError(t, os.Mkdir(planted, 0o755))
	require.NoError(t, os.Chmod(planted, 0o777))
	mark := program(t, filepath.Join(planted, "ipcrm"))
	rootsPath(t, planted, "/usr/sbin", "/usr/bin")
	h, err := New(Config{RunAs: "hangar-unit"}, nil)
	require.NoError(t, err)
	_, err = h.Init(context.Background())
	require.ErrorContains(t, err, "PATH directory "+planted)
	require.ErrorIs(t, h.Scrub(context.Background()), errNotReady, "no scrub without Init")
	require.NoFileExists(t, mark, "nothing of the planted program ran")
}

// TestRootOwned: what only root can change passes; a directory above, a link, the link's target
// or the program itself another user could change does not.
func TestRootOwned(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("owners are checked against root; the agent runs as root")
	}
	base := t.TempDir()
	dir := filepath.Join(base, "bin")
	require.NoError(t, os.Mkdir(dir, 0o755))
	prog := filepath.Join(dir, "prog")
	program(t, prog)

	real, err := rootOwned(prog, true, nil)
	require.NoError(t, err)
	require.Equal(t, prog, real)

	// A link to it, root's, in a root directory: resolved to the program.
	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink("bin/prog", link))
	real, err = rootOwned(link, true, nil)
	require.NoError(t, err)
	require.Equal(t, prog, real)

	// A link another user owns (in a sticky directory its owner could re-point it).
	require.NoError(t, os.Lchown(link, 65534, 65534))
	_, err = rootOwned(link, true, nil)
	require.ErrorContains(t, err, "the link "+link+" is not root's")

	// A link whose target lies in a directory others may write to.
	open := filepath.Join(base, "open")
	require.NoError(t, os.Mkdir(open, 0o755))
	require.NoError(t, os.Chmod(open, 0o777))
	program(t, filepath.Join(open, "prog"))
	link2 := filepath.Join(base, "link2")
	require.NoError(t, os.Symlink(filepath.Join(open, "prog"), link2))
	_, err = rootOwned(link2, true, nil)
	require.ErrorContains(t, err, open+" is writable by others")

	// ".." after a link goes up from where the link led, as the kernel takes it: here into the
	// world-writable directory, not back to base (where a root program of that name also is).
	inner := filepath.Join(open, "inner")
	require.NoError(t, os.Mkdir(inner, 0o755))
	require.NoError(t, os.Symlink(inner, filepath.Join(base, "linkdir")))
	program(t, filepath.Join(base, "prog"))
	_, err = rootOwned(base+"/linkdir/../prog", true, nil) // not filepath.Join: it cleans ".." away
	require.ErrorContains(t, err, open+" is writable by others")

	// The program itself: a system account's is allowed (Debian's at is daemon's), the runner
	// user's or an ordinary user's is not; and it may not be writable by others.
	require.NoError(t, os.Chown(prog, 1, 1))
	_, err = rootOwned(prog, true, &runnerUser{name: "runner", uid: 999})
	require.NoError(t, err)
	_, err = rootOwned(prog, true, &runnerUser{name: "runner", uid: 1})
	require.ErrorContains(t, err, prog+" is not root's (uid 1)")
	require.NoError(t, os.Chown(prog, 1000, 1000))
	_, err = rootOwned(prog, true, nil)
	require.ErrorContains(t, err, "is not root's (uid 1000)")
	require.NoError(t, os.Chown(prog, 0, 0))
	require.NoError(t, os.Chmod(prog, 0o775))
	_, err = rootOwned(prog, true, nil)
	require.ErrorContains(t, err, prog+" is writable by others")
}
