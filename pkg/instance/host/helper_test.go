package host

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDefaultHelper(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		helper func(dir string) // lays out dir/hangar-runas
		beside bool
	}{
		{"installed beside the agent", func(dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, HelperName), []byte("#!/bin/true\n"), 0o755))
		}, true},
		{"missing", func(string) {}, false},
		{"not executable", func(dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, HelperName), []byte("#!/bin/true\n"), 0o644))
		}, false},
		{"a directory", func(dir string) { require.NoError(t, os.Mkdir(filepath.Join(dir, HelperName), 0o755)) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			self := filepath.Join(dir, "hangar-agent")
			tc.helper(dir)
			want := self
			if tc.beside {
				want = filepath.Join(dir, HelperName)
			}
			require.Equal(t, want, defaultHelper(self))
		})
	}
}

func TestCheckHelper(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the helper's owner is checked against root; the agent runs as root")
	}
	t.Parallel()
	for _, tc := range []struct {
		name    string
		dirMode os.FileMode
		mode    os.FileMode
		want    string
	}{
		{"root's, 0755 in a 0755 directory", 0o755, 0o755, ""},
		{"in a sticky world-writable directory", os.ModeSticky | 0o777, 0o755, ""},
		{"group-writable", 0o755, 0o775, "writable by others"},
		{"world-writable", 0o755, 0o757, "writable by others"},
		{"in a world-writable directory", 0o777, 0o755, "writable by others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bin")
			require.NoError(t, os.Mkdir(dir, 0o755))
			require.NoError(t, os.Chmod(dir, tc.dirMode))
			p := filepath.Join(dir, HelperName)
			require.NoError(t, os.WriteFile(p, []byte("#!/bin/true\n"), 0o755))
			require.NoError(t, os.Chmod(p, tc.mode))
			err := checkHelper(p)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, p, "the error names the helper")
		})
	}
	require.ErrorContains(t, checkHelper("/nonexistent/"+HelperName), "no such file")
	dir := t.TempDir()
	require.NoError(t, os.Chown(dir, 0, 0))
	sub := filepath.Join(dir, "notroot")
	require.NoError(t, os.Mkdir(sub, 0o755))
	p := filepath.Join(sub, HelperName)
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/true\n"), 0o755))
	require.NoError(t, os.Chown(p, 65534, 65534))
	require.ErrorContains(t, checkHelper(p), "is not root's")

	// Every directory above it counts, not only its own: whoever may rename in /x may replace
	// /x/y/helper.
	top := filepath.Join(t.TempDir(), "open")
	require.NoError(t, os.Mkdir(top, 0o755))
	require.NoError(t, os.Chmod(top, 0o777))
	deep := filepath.Join(top, "bin")
	require.NoError(t, os.Mkdir(deep, 0o755))
	p = filepath.Join(deep, HelperName)
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/true\n"), 0o755))
	require.ErrorContains(t, checkHelper(p), top+" is writable by others")
}
