package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDispatch: help lists every command; a missing or unknown command exits 2 naming the
// accepted ones, and runs nothing; a known command gets the arguments after its name.
func TestDispatch(t *testing.T) {
	var got []string
	ran := false
	cmds := []command{{"refresh", "refresh the stack", func(args []string) { ran, got = true, args }}}
	tests := []struct {
		name     string
		args     []string
		code     int
		out, err string
		wantRan  bool
		wantArgs []string
	}{
		{"help", []string{"help"}, 0, "  refresh    refresh the stack\n", "", false, nil},
		{"-h", []string{"-h"}, 0, "usage: hangar <command>", "", false, nil},
		{"none", nil, 2, "", "hangar: no command: want one of refresh, help", false, nil},
		{"unknown", []string{"invoke", "--stack", "x"}, 2, "", `hangar: unknown command "invoke": want one of refresh, help`, false, nil},
		{"refresh", []string{"refresh", "--dry-run", "true"}, -1, "", "", true, []string{"--dry-run", "true"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ran, got = false, nil
			var stdout, stderr bytes.Buffer
			require.Equal(t, tc.code, dispatch(tc.args, cmds, &stdout, &stderr))
			require.Contains(t, stdout.String(), tc.out)
			require.Contains(t, stderr.String(), tc.err)
			require.Equal(t, tc.wantRan, ran)
			require.Equal(t, tc.wantArgs, got)
		})
	}
}
