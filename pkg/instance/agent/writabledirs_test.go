package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestWritableDirOutsideHomeIsSwept plays the writable-directory part of finding 7 of issue 21: a
// directory outside the runner user's home and the temporary directories that the user may write
// to (here one open to everyone, as images leave some) carries a file from run A to run B unless
// the agent finds it at start and sweeps it after every run.
func TestWritableDirOutsideHomeIsSwept(t *testing.T) {
	t.Parallel()
	testbed.RequireRoot(t, "writes a directory open to everyone in /var/lib")
	shared, err := os.MkdirTemp("/var/lib", "hangar-shared-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(shared) })
	require.NoError(t, os.Chmod(shared, 0o777))
	require.NoError(t, os.WriteFile(filepath.Join(shared, "image-file"), []byte("root's"), 0o644))

	e := newEnv(t, envOptions{})
	id := e.launch(time.Time{})
	in := e.warm(id)
	require.Contains(t, e.Sim.AgentLog(id), shared, "the agent logs what it found at start")

	claimed := e.claim(in, "3201")
	reg := e.waitSignal(id, state.SignalRegistered, "3201", claimed.Version)
	running := e.transition(state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: reg.Version, RunID: "3201"})
	done, err := e.GH.WaitJob(e.ctx, e.GH.QueueJob(repo, []string{"3201"},
		"echo from-A > "+shared+"/left-by-A && mkdir -p "+shared+"/dir-of-A/sub && echo wrote"))
	require.NoError(t, err)
	require.Contains(t, done.Output, "wrote", done.Output)
	require.FileExists(t, filepath.Join(shared, "left-by-A"))
	released := e.release(running)
	e.waitSignal(id, state.SignalDeregistered, "3201", released.Version)

	require.NoFileExists(t, filepath.Join(shared, "left-by-A"), "run A's file is swept")
	require.NoDirExists(t, filepath.Join(shared, "dir-of-A"), "run A's directory is swept")
	require.FileExists(t, filepath.Join(shared, "image-file"), "what is not the runner user's stays")

	claimed = e.claim(e.must(e.Store.Get(e.ctx, id)), "3202")
	reg = e.waitSignal(id, state.SignalRegistered, "3202", claimed.Version)
	e.transition(state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: reg.Version, RunID: "3202"})
	doneB, err := e.GH.WaitJob(e.ctx, e.GH.QueueJob(repo, []string{"3202"}, "echo listing; ls -A "+shared))
	require.NoError(t, err)
	require.Contains(t, doneB.Output, "listing", doneB.Output)
	require.False(t, strings.Contains(doneB.Output, "left-by-A") || strings.Contains(doneB.Output, "dir-of-A"), "run B sees nothing of A:\n%s", doneB.Output)
}
