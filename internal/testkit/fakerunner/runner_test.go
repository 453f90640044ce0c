package fakerunner

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFlagValue: run.sh's --jitconfig is read in either form, and other options are ignored.
func TestFlagValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--jitconfig", "abc"}, "abc"},
		{[]string{"--jitconfig=abc"}, "abc"},
		{[]string{"--once", "-jitconfig", "abc"}, "abc"},
		{[]string{"--jitconfig"}, ""},
		{[]string{"--startuptype", "service"}, ""},
	} {
		require.Equal(t, tc.want, flagValue(tc.args, "jitconfig"), "%q", tc.args)
	}
}

// TestResult: conclusions are logged in the real runner's words.
func TestResult(t *testing.T) {
	t.Parallel()
	for conclusion, want := range map[string]string{"success": "Succeeded", "failure": "Failed", "cancelled": "Canceled"} {
		require.Equal(t, want, result(conclusion))
	}
}
