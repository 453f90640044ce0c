package main

import (
	"errors"
	"net"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
	"github.com/hangar-ci/hangar/pkg/instance/runas"
)

// TestHelperCommandsInBothBinaries: hangar-runas and the agent's own binary (the fallback where
// hangar-runas is missing) answer the helper's commands alike; hangar-runas refuses anything
// else with its usage.
func TestHelperCommandsInBothBinaries(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().String()
	require.NoError(t, l.Close())

	for _, pkg := range []string{"github.com/hangar-ci/hangar/cmd/agent/runas", "github.com/hangar-ci/hangar/cmd/agent"} {
		bin := testbuild.Binary(t, pkg)
		out, err := exec.Command(bin, runas.ProbeCommand, closed).CombinedOutput()
		var exit *exec.ExitError
		require.True(t, errors.As(err, &exit), "%s: %v: %s", pkg, err, out)
		require.Equal(t, runas.ProbeBlocked, exit.ExitCode(), "%s: a refused connection is a blocked probe: %s", pkg, out)
		require.Contains(t, string(out), "blocked")

		out, err = exec.Command(bin, runas.ExecCommand, "--uid", "0", "--gid", "0", "--", "/bin/true").CombinedOutput()
		require.True(t, errors.As(err, &exit), "%s: %v: %s", pkg, err, out)
		require.Equal(t, 126, exit.ExitCode(), "%s refuses to run a command as root: %s", pkg, out)
		require.Contains(t, string(out), "unprivileged user")
	}

	out, err := exec.Command(testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/agent/runas"), "serve").CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "%v: %s", err, out)
	require.Equal(t, 2, exit.ExitCode())
	require.Contains(t, string(out), "usage: hangar-runas")
}
