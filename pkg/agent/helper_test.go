package agent

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
