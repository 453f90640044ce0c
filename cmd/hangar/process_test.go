package main_test

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
)

// hangarBinary is the command as the tests run it: built once, as the local world builds it.
func hangarBinary(t *testing.T) string {
	t.Helper()
	return testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/hangar")
}

// runHangar runs the built command with env and returns its exit code, stdout and stderr.
func runHangar(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.CommandContext(testbed.Context(t, 2*time.Minute), hangarBinary(t), args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	require.NoError(t, err)
	return 0, stdout.String(), stderr.String()
}

// startHangar starts the built command with env for a command that serves (ui, setup): the
// lines it prints come on the channel, which closes when it ends; its standard error is kept in
// a file.
func startHangar(t *testing.T, env []string, args ...string) (*exec.Cmd, <-chan string, stderrOf) {
	t.Helper()
	cmd := exec.Command(hangarBinary(t), args...)
	cmd.Env = env
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	errFile, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	require.NoError(t, err)
	cmd.Stderr = errFile
	require.NoError(t, cmd.Start())
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return cmd, lines, stderrOf{errFile.Name()}
}

// stderrOf is a process's standard error, kept in a file: read whole when a message needs it.
type stderrOf struct{ path string }

func (s stderrOf) String() string {
	b, _ := os.ReadFile(s.path)
	return string(b)
}
