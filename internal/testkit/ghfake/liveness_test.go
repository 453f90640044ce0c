package ghfake_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
)

// configured registers a stand-in runner named name with labels in octo/app and returns its
// directory.
func configured(t *testing.T, s *ghfake.Server, name, labels string) string {
	t.Helper()
	reg, _, err := client(t, s, "admin-token").Actions.CreateRegistrationToken(testCtx(t), "octo", "app")
	require.NoError(t, err)
	dir := runnerDir(t)
	out, err := sh(t, dir, "config.sh", "--unattended", "--url", s.URL()+"/octo/app", "--token", reg.GetToken(),
		"--name", name, "--labels", labels, "--no-default-labels")
	require.NoError(t, err, out)
	return dir
}

// blocking is a job command that runs until the file stop exists (created when the test ends,
// so that no job outlives it) or its directory is gone: the test's temporary directory is removed
// right after, and a job the loop had not yet seen the file of (its runner killed, say) would
// otherwise wait for it for ever.
func blocking(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	stop := filepath.Join(dir, "stop")
	t.Cleanup(func() { _ = os.WriteFile(stop, nil, 0o644) })
	return "echo started; while [ ! -e " + strconv.Quote(stop) + " ] && [ -d " + strconv.Quote(dir) + " ]; do sleep 0.1; done"
}

// TestLostRunner: a busy runner cannot be deleted (422); a runner killed mid-job is lost after
// SetRunnerLostAfter: its job fails, it is offline and idle, and can be deleted.
func TestLostRunner(t *testing.T) {
	t.Parallel()
	s := ghfake.New("admin-token")
	defer s.Close()
	ctx := testCtx(t)
	gh := client(t, s, "admin-token")
	dir := configured(t, s, "doomed", "lost")
	p := startRun(t, dir)
	job := s.QueueJob("octo/app", []string{"lost"}, blocking(t))
	waitStatus(t, s, job, "in_progress")
	runner := s.Runners("octo/app")[0]
	require.True(t, runner.Busy)

	_, err := gh.Actions.RemoveRunner(ctx, "octo", "app", runner.ID)
	require.Equal(t, 422, statusOf(err))
	require.Equal(t, `Bad request - Runner "doomed" is still running a job"`, messageOf(err))

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	p.wait(t)
	s.SetRunnerLostAfter(time.Second)
	j, err := s.WaitJob(ctx, job)
	require.NoError(t, err)
	require.Equal(t, "failure", j.Conclusion)
	require.Contains(t, j.Output, "lost communication with the server")
	runner = s.Runners("octo/app")[0]
	require.Equal(t, "offline", runner.Status)
	require.False(t, runner.Busy)
	_, err = gh.Actions.RemoveRunner(ctx, "octo", "app", runner.ID)
	require.NoError(t, err)
	require.Empty(t, s.Runners(""))
}

// TestCancelJob: a job cancelled while it runs is stopped by its runner (which learns it from
// its heartbeat) and completed cancelled, the runner going on to the next job; a runner
// interrupted mid-job reports its job cancelled, goes offline and exits 0. Heartbeats keep a
// runner whose job outlasts SetRunnerLostAfter from being lost.
func TestCancelJob(t *testing.T) {
	t.Parallel()
	s := ghfake.New("admin-token")
	defer s.Close()
	ctx := testCtx(t)
	// Long enough that a runner stopping its job on a busy machine (SIGTERM, then the job's
	// processes killed and waited for) reports before the server takes it for lost.
	s.SetRunnerLostAfter(5 * time.Second)
	dir := configured(t, s, "worker", "cancel")
	p := startRun(t, dir)

	job := s.QueueJob("octo/app", []string{"cancel"}, blocking(t))
	waitStatus(t, s, job, "in_progress")
	// The job outlives lostAfter twice over, its runner heard from all along (the runner's only
	// requests while it is busy are its heartbeats).
	beats := s.Requests("runner")
	require.Eventually(t, func() bool { return s.Requests("runner")-beats >= 20 }, time.Minute, 50*time.Millisecond)
	j, _ := s.Job(job)
	require.Equal(t, "in_progress", j.Status, "a runner sending heartbeats is not lost")
	s.CancelJob(job)
	j, err := s.WaitJob(ctx, job)
	require.NoError(t, err)
	require.Equal(t, "cancelled", j.Conclusion)
	require.Contains(t, j.Output, "started")

	next := s.QueueJob("octo/app", []string{"cancel"}, "echo next")
	j, err = s.WaitJob(ctx, next)
	require.NoError(t, err)
	require.Equal(t, "success", j.Conclusion, "the runner goes on after a cancelled job")

	interrupted := s.QueueJob("octo/app", []string{"cancel"}, blocking(t))
	waitStatus(t, s, interrupted, "in_progress")
	// The server counts the job in progress once it has handed it out; the runner may not have
	// read that answer yet, and a runner stopped before it has a job has none to report.
	require.Eventually(t, func() bool {
		return strings.Contains(p.stdout.String(), fmt.Sprintf("Running job: job-%d", interrupted))
	},
		time.Minute, 10*time.Millisecond, "the runner took the job")
	// An interrupted runner stops heartbeating while it stops its job and reports it; on a
	// loaded two-core machine that has taken longer than 5 s, and this part is about the report,
	// not about losing runners: give it a minute.
	s.SetRunnerLostAfter(time.Minute)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t), p.stderr.String())
	j, err = s.WaitJob(ctx, interrupted)
	require.NoError(t, err)
	require.Equal(t, "cancelled", j.Conclusion, j.Output)
	require.Contains(t, p.stdout.String(), "completed with result: Canceled")
	runner := s.Runners("octo/app")[0]
	require.Equal(t, "offline", runner.Status)
	require.False(t, runner.Busy)
}
