package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCleanKeepsEscapesFromTheTerminal: what an instance reports reaches the operator's terminal
// without a control sequence a job could have written into it.
func TestCleanKeepsEscapesFromTheTerminal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"plain text", "plain text"},
		{"two\nlines", "two\nlines"},
		{"\x1b]0;pwned\x07title", `\x1b]0;pwned\x07title`},
		{"\x1b[2Jclear", `\x1b[2Jclear`},
		{"tab\there", "tab  here"},
		{"\u009b31mred", `\x9b31mred`},
		{"é ünïcode", "é ünïcode"},
		{"\u202eevil", `\u202eevil`},
	} {
		require.Equal(t, tc.want, clean(tc.in), "%q", tc.in)
	}
	var b bytes.Buffer
	require.NoError(t, table(&b, []string{"A", "B"}, [][]string{{"x\x1b[31m", "multi\nline"}}))
	require.Equal(t, "A          B\nx\\x1b[31m  multi line\n", b.String())
}
