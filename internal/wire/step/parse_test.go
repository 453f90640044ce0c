package step

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestParseList: list inputs split on commas, spaces, tabs and new lines; empty items vanish.
func TestParseList(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"c*", "m7g.*", "t3.micro", "x"}, ParseList("c*, m7g.*  t3.micro\n\tx,"))
	require.Empty(t, ParseList(""))
	require.Empty(t, ParseList(" ,\n"))
}

// TestParseTags: key=value pairs separated by commas or new lines, trimmed; a pair without = or
// with an empty key is refused, naming the input and the pair.
func TestParseTags(t *testing.T) {
	t.Parallel()
	got, err := ParseTags("team = ci, cost=42\nempty=")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"team": "ci", "cost": "42", "empty": ""}, got)
	_, err = ParseTags("team")
	require.EqualError(t, err, `tags: "team": want key=value pairs separated by commas or new lines`)
	_, err = ParseTags("=x")
	require.ErrorContains(t, err, `tags: "=x"`)
}

// TestFormatDuration: durations read as typed in a workflow, and parse back to themselves.
func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{5 * time.Minute: "5m", 2 * time.Hour: "2h", 90 * time.Minute: "1h30m",
		90 * time.Second: "1m30s", 10 * time.Second: "10s", time.Hour + time.Second: "1h0m1s"} {
		require.Equal(t, want, FormatDuration(d))
		back, err := time.ParseDuration(want)
		require.NoError(t, err)
		require.Equal(t, d, back)
	}
}
