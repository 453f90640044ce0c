package localenv_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fleetsim"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// Close stops the real agent, its metadata mock, the runner it registered (which the agent starts
// in a process group of its own) and the job the runner runs, leaving nothing running.
func TestCloseLeavesNoProcess(t *testing.T) {
	testbed.Require(t)
	ctx := testbed.Context(t, 3*time.Minute)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755)) // the runner's unprivileged user must reach it
	t.Cleanup(func() {                                     // whatever a failing test leaves, so that it does not leak what it reports
		for _, p := range fleetsim.ProcessesUnder(dir) {
			var pid int
			if _, err := fmt.Sscanf(p, "pid %d", &pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	e, err := localenv.Start(ctx, localenv.Options{Stack: testbed.Name(t, "localenv"), Dir: dir, Baked: true,
		AgentArgs: []string{"--poll-interval", "250ms"}})
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			e.Close()
		}
	})
	id, err := e.Launch(ctx, time.Time{})
	require.NoError(t, err)
	in, err := e.Warm(ctx, id)
	require.NoError(t, err)
	in, err = e.Claim(ctx, in, "4242")
	require.NoError(t, err)
	_, err = e.WaitSignal(ctx, id, state.SignalRegistered, "4242", in.Version)
	require.NoError(t, err)
	e.GH.QueueJob(localenv.Repo, []string{"4242"}, "sleep 600") // a job that outlives its runner unless killed
	require.Eventually(t, func() bool {
		procs := strings.Join(fleetsim.ProcessesUnder(dir), "\n")
		return strings.Contains(procs, "fake-runner run") && strings.Contains(procs, "imds.json") &&
			strings.Contains(procs, "--stack "+e.Stack) && strings.Contains(procs, "sleep 600")
	}, time.Minute, 20*time.Millisecond, "the job, the runner, the metadata mock and the agent should run")

	e.Close()
	closed = true

	require.Empty(t, fleetsim.ProcessesUnder(dir), "Close left processes")
}
