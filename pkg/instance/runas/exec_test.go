package runas

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExecArgsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		user           User
		userNamespaces bool
		argv           []string
	}{
		{"groups, namespaces refused", User{UID: 1001, GID: 1002, Groups: []uint32{27, 999}}, false, []string{"/runner/run.sh"}},
		{"no groups, namespaces allowed", User{UID: 1001, GID: 1001, Groups: []uint32{}}, true, []string{"/runner/config.sh", "--url", "https://github.com/o/r", "--", "-x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := ExecArgs(tc.user, tc.userNamespaces, tc.argv...)
			require.Equal(t, ExecCommand, args[0])
			spec, err := parseExec(args[1:])
			require.NoError(t, err)
			require.Equal(t, execSpec{user: tc.user, userNamespaces: tc.userNamespaces, argv: tc.argv}, spec)
		})
	}
}

func TestParseExecRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"root", []string{"--uid", "0", "--gid", "1000", "--", "/bin/true"}, "unprivileged user"},
		{"root's group", []string{"--uid", "1000", "--gid", "0", "--", "/bin/true"}, "unprivileged user"},
		{"no command", []string{"--uid", "1000", "--gid", "1000", "--"}, "then -- and the command"},
		{"group 0", []string{"--uid", "1000", "--gid", "1000", "--groups", "27,0", "--", "/bin/true"}, `--groups "27,0"`},
		{"not a number", []string{"--uid", "1000", "--gid", "1000", "--groups", "docker", "--", "/bin/true"}, `--groups "docker"`},
		{"unknown flag", []string{"--privileged", "--uid", "1000", "--gid", "1000", "--", "/bin/true"}, "privileged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseExec(tc.args)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestMainDispatches(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"serve"}, {ProbeCommand}, {ProbeCommand, "a:1", "b:2"}, {ClearKeyringsCommand, "extra"}} {
		_, ok := Main(args)
		require.False(t, ok, "%q is none of the helper's commands", args)
	}
	code, ok := Main([]string{ExecCommand, "--uid", "0", "--gid", "0", "--", "/bin/true"})
	require.True(t, ok)
	require.Equal(t, 126, code, "a refused exec returns the shell's could-not-execute status")
}
