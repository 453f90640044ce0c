package ghfake_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v66/github"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fakerunner"
	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
)

func client(t *testing.T, s *ghfake.Server, tok string) *github.Client {
	t.Helper()
	c, err := github.NewClient(nil).WithAuthToken(tok).WithEnterpriseURLs(s.URL()+"/", s.URL()+"/")
	require.NoError(t, err)
	c.BaseURL.Path = "/" // the stand-in serves the REST API at its root, as api.github.com does
	return c
}

// runnerDir installs the stand-in runner into a fresh directory.
func runnerDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, fakerunner.Install(dir, testbuild.Binary(t, "github.com/hangar-ci/hangar/internal/testkit/cmd/fake-runner")))
	return dir
}

func sh(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, args[0]), args[1:]...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestRunnerLifecycle: a registration token from the REST API registers a runner with the given
// labels; it takes only jobs whose labels it has; a remove token removes it; nothing remains.
func TestRunnerLifecycle(t *testing.T) {
	t.Parallel()
	s := ghfake.New("admin-token")
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gh := client(t, s, "admin-token")

	reg, _, err := gh.Actions.CreateRegistrationToken(ctx, "octo", "app")
	require.NoError(t, err)
	require.True(t, reg.GetExpiresAt().After(time.Now().Add(50*time.Minute)))

	dir := runnerDir(t)
	out, err := sh(t, dir, "config.sh", "--unattended", "--url", s.URL()+"/octo/app", "--token", reg.GetToken(),
		"--name", "hangar-i-1", "--labels", "4242,linux", "--no-default-labels", "--replace")
	require.NoError(t, err, out)

	runners, _, err := gh.Actions.ListRunners(ctx, "octo", "app", nil)
	require.NoError(t, err)
	require.Equal(t, 1, runners.TotalCount)
	r := runners.Runners[0]
	require.Equal(t, "hangar-i-1", r.GetName())
	require.Equal(t, "offline", r.GetStatus())
	var labels []string
	for _, l := range r.Labels {
		labels = append(labels, l.GetName())
	}
	require.Equal(t, []string{"4242", "linux"}, labels, "no default labels")

	run := exec.Command(filepath.Join(dir, "run.sh"))
	require.NoError(t, run.Start())
	other := s.QueueJob("octo/app", []string{"9999"}, "echo wrong")
	mine := s.QueueJob("octo/app", []string{"4242"}, "echo hello from $RUNNER_NAME; pwd")
	job, err := s.WaitJob(ctx, mine)
	require.NoError(t, err)
	require.Equal(t, "success", job.Conclusion)
	require.Equal(t, "hangar-i-1", job.RunnerName)
	require.Contains(t, job.Output, "hello from hangar-i-1")
	require.Contains(t, job.Output, filepath.Join(dir, "_work", "app", "app"))
	j, _ := s.Job(other)
	require.Equal(t, "queued", j.Status, "a job for another label is not taken")
	require.Equal(t, "online", s.Runners("octo/app")[0].Status)

	require.NoError(t, run.Process.Signal(os.Interrupt))
	require.NoError(t, run.Wait())
	require.Equal(t, "offline", s.Runners("octo/app")[0].Status)
	_, err = gh.Actions.RemoveRunner(ctx, "octo", "app", r.GetID())
	require.NoError(t, err)
	require.Empty(t, s.Runners(""), "nothing stale remains")
}

// TestRefusals: bad admin credentials, wrong-scope, expired and refused tokens all fail the way
// GitHub fails them.
func TestRefusals(t *testing.T) {
	t.Parallel()
	s := ghfake.New("admin-token")
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, resp, err := client(t, s, "wrong").Actions.CreateRegistrationToken(ctx, "octo", "app")
	require.Error(t, err)
	require.Equal(t, 401, resp.StatusCode)

	gh := client(t, s, "admin-token")
	reg, _, err := gh.Actions.CreateRegistrationToken(ctx, "octo", "app")
	require.NoError(t, err)
	dir := runnerDir(t)
	config := func(url, tok string) (string, error) {
		return sh(t, dir, "config.sh", "--unattended", "--url", url, "--token", tok, "--name", "r", "--labels", "1")
	}
	out, err := config(s.URL()+"/octo/other", reg.GetToken())
	require.Error(t, err)
	require.Contains(t, out, "is for octo/app, not octo/other")

	out, err = config(s.URL()+"/octo/app", "AREGNOTATOKEN")
	require.Error(t, err)
	require.Contains(t, out, "invalid registration token")

	s.RefuseRegistrations(true)
	out, err = config(s.URL()+"/octo/app", reg.GetToken())
	require.Error(t, err)
	require.Contains(t, out, "registration refused")
	s.RefuseRegistrations(false)

	s.SetClock(func() time.Time { return time.Now().Add(2 * time.Hour) })
	out, err = config(s.URL()+"/octo/app", reg.GetToken())
	require.Error(t, err)
	require.Contains(t, out, "token expired")
	require.Empty(t, s.Runners(""))
}

// TestOrgScopeAndPaging: org runners take jobs of the org's repositories; listing pages.
func TestOrgScopeAndPaging(t *testing.T) {
	t.Parallel()
	s := ghfake.New("admin-token")
	defer s.Close()
	s.SetPageSize(2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gh := client(t, s, "admin-token")
	reg, _, err := gh.Actions.CreateOrganizationRegistrationToken(ctx, "octo")
	require.NoError(t, err)
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		dir := runnerDir(t)
		out, err := sh(t, dir, "config.sh", "--unattended", "--url", s.URL()+"/octo", "--token", reg.GetToken(), "--name", name, "--labels", "77")
		require.NoError(t, err, out)
	}
	var names []string
	opts := &github.ListRunnersOptions{}
	for {
		page, resp, err := gh.Actions.ListOrganizationRunners(ctx, "octo", opts)
		require.NoError(t, err)
		for _, r := range page.Runners {
			names = append(names, r.GetName())
			require.True(t, strings.Contains(strings.Join(labelNames(r), ","), "self-hosted"), "default labels without --no-default-labels")
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	require.Equal(t, []string{"a", "b", "c", "d", "e"}, names)

	first := s.Runners("octo")[0]
	_, err = gh.Actions.RemoveOrganizationRunner(ctx, "octo", first.ID)
	require.NoError(t, err)
	require.Len(t, s.Runners("octo"), 4)
}

func labelNames(r *github.Runner) []string {
	var out []string
	for _, l := range r.Labels {
		out = append(out, l.GetName())
	}
	return out
}

// TestJobStartedHook: the stand-in runner runs the script its environment names in
// ACTIONS_RUNNER_HOOK_JOB_STARTED before each job, with bash and the job's GITHUB_RUN_ID,
// GITHUB_REPOSITORY and GITHUB_WORKSPACE, its output in the job's log, as the real runner does; a
// failing hook fails the job and its command never runs. Jobs queued by label alone belong to
// the run their first label names.
func TestJobStartedHook(t *testing.T) {
	t.Parallel()
	s := ghfake.New("admin-token")
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gh := client(t, s, "admin-token")
	reg, _, err := gh.Actions.CreateRegistrationToken(ctx, "octo", "app")
	require.NoError(t, err)
	dir := runnerDir(t)
	out, err := sh(t, dir, "config.sh", "--unattended", "--url", s.URL()+"/octo/app", "--token", reg.GetToken(),
		"--name", "hangar-i-1", "--labels", "4242", "--no-default-labels")
	require.NoError(t, err, out)
	hook := filepath.Join(t.TempDir(), "hook.sh")
	require.NoError(t, os.WriteFile(hook, []byte(`[[ -n $BASH_VERSION ]] && echo "hook: run=$GITHUB_RUN_ID repo=$GITHUB_REPOSITORY ws=$GITHUB_WORKSPACE"
[ "$GITHUB_RUN_ID" = 4242 ] || { echo "hook: refused"; exit 1; }
`), 0o644))
	run := exec.Command(filepath.Join(dir, "run.sh"))
	run.Env = append(os.Environ(), "ACTIONS_RUNNER_HOOK_JOB_STARTED="+hook)
	require.NoError(t, run.Start())
	defer func() { _ = run.Process.Signal(os.Interrupt); _ = run.Wait() }()

	foreign := s.QueueRunJob("octo/app", "777", []string{"4242"}, "echo COMMAND-RAN")
	j, err := s.WaitJob(ctx, foreign)
	require.NoError(t, err)
	require.Equal(t, "failure", j.Conclusion, j.Output)
	require.Contains(t, j.Output, "hook: run=777 repo=octo/app ws="+filepath.Join(dir, "_work", "app", "app"))
	require.Contains(t, j.Output, "hook: refused")
	require.NotContains(t, j.Output, "COMMAND-RAN")

	for labels, run := range map[string]string{"4242": "4242", "4242-linux": "4242", "linux": "linux"} {
		j, ok := s.Job(s.QueueJob("octo/none", strings.Split(labels, ","), "true"))
		require.True(t, ok)
		require.Equal(t, run, j.RunID, "the run of a job labelled %s", labels)
	}
	mine := s.QueueJob("octo/app", []string{"4242"}, "echo COMMAND-RAN")
	j, err = s.WaitJob(ctx, mine)
	require.NoError(t, err)
	require.Equal(t, "success", j.Conclusion, j.Output)
	require.Contains(t, j.Output, "hook: run=4242")
	require.Contains(t, j.Output, "COMMAND-RAN")
}
