package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// foreignJob is what a job that is not the run's would do on the run's runner: leave a marker
// (the test's stand-in for a daemon that reads the victim's later jobs).
func foreignJob(marker string) string {
	return "touch " + marker + "; echo FOREIGN-COMMAND-RAN"
}

// requireRefused asserts that job failed before its command ran, with the hook's message in its
// log.
func requireRefused(t *testing.T, e *env, job int64, marker string) {
	t.Helper()
	done, err := e.GH.WaitJob(e.ctx, job)
	require.NoError(t, err)
	require.Equal(t, "failure", done.Conclusion, "the foreign job is failed:\n%s", done.Output)
	require.NotContains(t, done.Output, "FOREIGN-COMMAND-RAN", "the foreign job's command never ran")
	require.NoFileExists(t, marker, "the foreign job's command never ran")
	require.Contains(t, done.Output, "hangar: job refused", "the hook says why, in the job's log")
}

// TestForeignJobRefused plays finding 2 of issue 21: run ids are public, so a job of another run
// (a fork's pull request runs in the base repository) or, with organisation runners, of another
// repository of the runner group can name run A's label and land on A's runner. The run's
// job-started hook fails it before its first step; A's own jobs still run.
func TestForeignJobRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.launch(time.Time{})
	in := e.warm(id)
	tag := strings.TrimPrefix(id, "i-")
	marker := func(name string) string { return filepath.Join(os.TempDir(), "hangar-foreign-"+name+"-"+tag) }

	// Run A with repository runners.
	claimed := e.claim(in, "3101")
	reg := e.waitSignal(id, state.SignalRegistered, "3101", claimed.Version)
	running := e.transition(state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: reg.Version, RunID: "3101"})

	t.Run("a job of another run of the repository naming the run's label fails before its first step", func(t *testing.T) {
		m := marker("run")
		requireRefused(t, e, e.GH.QueueRunJob(repo, "3199", []string{"3101"}, foreignJob(m)), m)
	})
	t.Run("the run's own job runs, its repository compared without regard to case", func(t *testing.T) {
		job := e.GH.QueueRunJob(strings.ToUpper(repo), "3101", []string{"3101"},
			`echo pwned > "$ACTIONS_RUNNER_HOOK_JOB_STARTED" 2>/dev/null && echo hook-writable || echo hook-readonly
rm -f "$ACTIONS_RUNNER_HOOK_JOB_STARTED" 2>/dev/null && echo hook-removable || echo hook-kept
echo own job ran`)
		done, err := e.GH.WaitJob(e.ctx, job)
		require.NoError(t, err)
		require.Equal(t, "success", done.Conclusion, done.Output)
		require.Contains(t, done.Output, "own job ran")
		require.Contains(t, done.Output, "hook-readonly", "the job cannot rewrite the hook")
		require.Contains(t, done.Output, "hook-kept", "the job cannot remove the hook")
	})
	t.Run("the hook is root's and read-only, beside the run's directories", func(t *testing.T) {
		st, err := os.Lstat(filepath.Join(e.Sim.RunsDir(id), "3101-1", "job-started.sh"))
		require.NoError(t, err)
		require.True(t, st.Mode().IsRegular())
		require.Equal(t, os.FileMode(0o555), st.Mode().Perm())
		require.Equal(t, uint32(0), st.Sys().(*syscall.Stat_t).Uid)
	})
	released := e.release(running)
	e.waitSignal(id, state.SignalDeregistered, "3101", released.Version)

	// Run B with organisation runners, in a group open to two repositories of the organisation.
	owner, _, _ := strings.Cut(repo, "/")
	other := owner + "/other"
	e.GH.SetGroup("hangar-both", repo, other)
	tok, _, err := e.GitHub.Actions.CreateOrganizationRegistrationToken(e.ctx, owner)
	require.NoError(t, err)
	in = e.must(e.Store.Get(e.ctx, id))
	claimed = e.transition(state.Change{InstanceID: id, From: in.State, To: state.Claimed, Version: in.Version,
		Assign: &state.Assignment{RunID: "3102", RunAttempt: 1, Repo: repo, RunnerURL: e.GH.URL() + "/" + owner, RunnerGroup: "hangar-both",
			RunnerPrefix: e.RunnerNames().Prefix(), HandOverSum: state.SecretSum(tok.GetToken())}})
	require.NoError(t, e.HandOver(e.ctx, claimed, tok.GetToken()))
	reg = e.waitSignal(id, state.SignalRegistered, "3102", claimed.Version)
	e.transition(state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: reg.Version, RunID: "3102"})
	require.Len(t, e.GH.Runners(ghfake.Scope(owner)), 1)
	require.Equal(t, "hangar-both", e.GH.Runners(ghfake.Scope(owner))[0].Group)

	t.Run("with organisation runners, a job of another repository of the group fails before its first step", func(t *testing.T) {
		m := marker("repo")
		requireRefused(t, e, e.GH.QueueRunJob(other, "3102", []string{"3102"}, foreignJob(m)), m)
	})
	t.Run("with organisation runners, the run's own job runs", func(t *testing.T) {
		done, err := e.GH.WaitJob(e.ctx, e.GH.QueueRunJob(repo, "3102", []string{"3102"}, "echo own org job ran"))
		require.NoError(t, err)
		require.Equal(t, "success", done.Conclusion, done.Output)
		require.Contains(t, done.Output, "own org job ran")
	})
}
