package host

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// libraries sets libraryDirs to dirs for the test.
func libraries(t *testing.T, dirs ...string) {
	old := libraryDirs
	t.Cleanup(func() { libraryDirs = old })
	libraryDirs = dirs
}

// TestImageContractNamesEveryMissingPiece: an image without cgroup.kill, iptables, git and
// libicu fails with one error naming each of them, and nothing it has; with every piece it
// passes; runs that may reach the metadata endpoint need no firewall.
func TestImageContractNamesEveryMissingPiece(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("programs on root's PATH are checked against root; the agent runs as root")
	}
	base := t.TempDir()
	bin, libs, cg := filepath.Join(base, "bin"), filepath.Join(base, "lib"), filepath.Join(base, "cgroup")
	for _, d := range []string{bin, libs, cg} {
		require.NoError(t, os.Mkdir(d, 0o755))
	}
	rootsPath(t, bin)
	libraries(t, libs)
	require.NoError(t, os.WriteFile(filepath.Join(libs, "libssl.so.3"), []byte("elf"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(libs, "libz.so.1"), []byte("elf"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(libs, "libicuuc.so.72"), nil, 0o644)) // emptied out: not the library
	ctx := context.Background()

	err := checkImage(ctx, Config{Iptables: "iptables"}, nil, cg)
	require.ErrorIs(t, err, ErrImageContract)
	for _, piece := range []string{"cgroup v2 with cgroup.kill", "iptables with the owner and cgroup matches (no iptables on " + bin, "git:", "libicu"} {
		require.ErrorContains(t, err, piece)
	}
	require.NotContains(t, err.Error(), "libssl")
	require.NotContains(t, err.Error(), "zlib")

	// An iptables that cannot load the cgroup match is named with what it said.
	require.NoError(t, os.WriteFile(filepath.Join(bin, "iptables"), []byte("#!/bin/sh\n[ \"$2\" = owner ] && exit 0\necho \"Couldn't load match 'cgroup'\" >&2\nexit 2\n"), 0o755))
	err = checkImage(ctx, Config{Iptables: "iptables"}, nil, cg)
	require.ErrorContains(t, err, "-m cgroup: exit status 2: Couldn't load match 'cgroup'")

	// Every piece there: nothing to say.
	require.NoError(t, os.WriteFile(filepath.Join(bin, "iptables"), []byte("#!/bin/sh\nexit 0\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "git"), []byte("#!/bin/sh\nexit 0\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(libs, "libicuuc.so.72"), []byte("elf"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(cg, "cgroup.kill"), nil, 0o200)) // cgroupfs files are regular
	require.NoError(t, checkImage(ctx, Config{Iptables: "iptables"}, nil, cg))

	// Runs that may reach the metadata endpoint need no firewall.
	require.NoError(t, os.Remove(filepath.Join(bin, "iptables")))
	require.ErrorContains(t, checkImage(ctx, Config{Iptables: "iptables"}, nil, cg), "no iptables")
	cfg := Config{Iptables: "iptables"}
	cfg.Runner.MetadataAccess = true
	require.NoError(t, checkImage(ctx, cfg, nil, cg))
}
