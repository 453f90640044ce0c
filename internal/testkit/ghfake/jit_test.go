package ghfake_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v66/github"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
)

// TestJITConfig: generate-jitconfig registers a runner with exactly the labels asked for, in the
// group asked for, and returns the stand-in's encoded configuration; it refuses what GitHub
// refuses; organisations list their runner groups, paged.
func TestJITConfig(t *testing.T) {
	t.Parallel()
	s := ghfake.New("admin-token")
	defer s.Close()
	ctx := testCtx(t)
	gh := client(t, s, "admin-token")

	cfg := jitConfig(t, s, "octo/app", "jit-1", 1, "hangar", "linux-x64")
	require.Equal(t, "jit-1", cfg.GetRunner().GetName())
	require.Equal(t, "offline", cfg.GetRunner().GetStatus())
	require.False(t, cfg.GetRunner().GetBusy())
	listed, _, err := gh.Actions.GetRunner(ctx, "octo", "app", cfg.GetRunner().GetID())
	require.NoError(t, err)
	require.Equal(t, []string{"hangar", "linux-x64"}, labelNames(listed), "exactly the labels given: none added")
	decoded, err := ghfake.DecodeJITConfig(cfg.GetEncodedJITConfig())
	require.NoError(t, err)
	require.Equal(t, s.URL()+"/octo/app", decoded.URL)
	require.Equal(t, cfg.GetRunner().GetID(), decoded.ID)
	require.Equal(t, "jit-1", decoded.Name)
	require.Equal(t, "_work", decoded.Work)
	require.Equal(t, []string{"hangar", "linux-x64"}, decoded.Labels)
	require.NotEmpty(t, decoded.Credential)
	runners := s.Runners("octo/app")
	require.Len(t, runners, 1)
	require.True(t, runners[0].JIT)
	require.Equal(t, 1, s.Registrations())
	require.Equal(t, 1, s.Minted("jitconfig"))

	work := "/srv/work"
	_, _, err = gh.Actions.GenerateRepoJITConfig(ctx, "octo", "app", &github.GenerateJITConfigRequest{Name: "jit-1", RunnerGroupID: 1, Labels: []string{"x"}})
	require.Equal(t, 409, statusOf(err))
	require.Equal(t, "Already exists - A runner with the name jit-1 already exists.", messageOf(err))
	for _, tc := range []struct {
		name   string
		req    github.GenerateJITConfigRequest
		status int
	}{
		{"repository group other than the default", github.GenerateJITConfigRequest{Name: "a", RunnerGroupID: 2, Labels: []string{"x"}}, 422},
		{"no name", github.GenerateJITConfigRequest{RunnerGroupID: 1, Labels: []string{"x"}}, 422},
		{"name over 64 characters", github.GenerateJITConfigRequest{Name: strings.Repeat("n", 65), RunnerGroupID: 1, Labels: []string{"x"}}, 422},
		{"no labels", github.GenerateJITConfigRequest{Name: "a", RunnerGroupID: 1}, 422},
		{"over 100 labels", github.GenerateJITConfigRequest{Name: "a", RunnerGroupID: 1, Labels: make([]string, 101)}, 422},
		{"a work folder", github.GenerateJITConfigRequest{Name: "a", RunnerGroupID: 1, Labels: []string{"x"}, WorkFolder: &work}, 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := gh.Actions.GenerateRepoJITConfig(ctx, "octo", "other", &tc.req)
			if tc.status != 201 {
				require.Equal(t, tc.status, statusOf(err), "%v", err)
				return
			}
			require.NoError(t, err)
			decoded, err := ghfake.DecodeJITConfig(out.GetEncodedJITConfig())
			require.NoError(t, err)
			require.Equal(t, work, decoded.Work)
		})
	}

	// Organisations: the default group and SetGroup's, by id, paged.
	s.SetGroup("hangar", "octo/app")
	s.SetGroup("second")
	var groups []*github.RunnerGroup
	opts := &github.ListOrgRunnerGroupOptions{ListOptions: github.ListOptions{PerPage: 1}}
	for {
		page, resp, err := gh.Actions.ListOrganizationRunnerGroups(ctx, "octo", opts)
		require.NoError(t, err)
		require.Equal(t, 3, page.TotalCount)
		groups = append(groups, page.RunnerGroups...)
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	require.Len(t, groups, 3)
	for i, want := range []struct {
		id        int64
		name, vis string
		isDefault bool
	}{{1, "Default", "all", true}, {2, "hangar", "selected", false}, {3, "second", "selected", false}} {
		require.Equal(t, want.id, groups[i].GetID())
		require.Equal(t, want.name, groups[i].GetName())
		require.Equal(t, want.vis, groups[i].GetVisibility())
		require.Equal(t, want.isDefault, groups[i].GetDefault())
	}
	org := jitConfig(t, s, "octo", "jit-org", 2, "hangar")
	require.Equal(t, "hangar", s.Runners("octo")[0].Group)
	require.Equal(t, []string{"hangar"}, labelNames(org.GetRunner()))
	_, _, err = gh.Actions.GenerateOrgJITConfig(ctx, "octo", &github.GenerateJITConfigRequest{Name: "b", RunnerGroupID: 99, Labels: []string{"x"}})
	require.Equal(t, 404, statusOf(err), "an organisation's unknown group")

	s.RefuseRunners("refused-")
	_, _, err = gh.Actions.GenerateRepoJITConfig(ctx, "octo", "app", &github.GenerateJITConfigRequest{Name: "refused-1", RunnerGroupID: 1, Labels: []string{"x"}})
	require.Equal(t, 503, statusOf(err))
}

// TestJITRunner: the stand-in runner started with a just-in-time configuration in its
// environment takes exactly one of two jobs it could take, in the configuration's work folder,
// writes no settings, exits 0, and its runner is gone; the configuration cannot be used again.
// A runner stopped before any job goes offline and exits 0; its configuration is spent too.
func TestJITRunner(t *testing.T) {
	t.Parallel()
	s := ghfake.New("admin-token")
	defer s.Close()
	ctx := testCtx(t)
	cfg := jitConfig(t, s, "octo/app", "jit-1", 1, "jit")
	first := s.QueueJob("octo/app", []string{"jit"}, "echo ran on $RUNNER_NAME; pwd")
	second := s.QueueJob("octo/app", []string{"jit"}, "echo ran on $RUNNER_NAME")

	dir := runnerDir(t)
	env := "ACTIONS_RUNNER_INPUT_JITCONFIG=" + cfg.GetEncodedJITConfig()
	p := startRun(t, dir, env)
	require.Equal(t, 0, p.wait(t), "stdout:\n%s\nstderr:\n%s", p.stdout.String(), p.stderr.String())
	j, err := s.WaitJob(ctx, first)
	require.NoError(t, err)
	require.Equal(t, "success", j.Conclusion, j.Output)
	require.Equal(t, "jit-1", j.RunnerName)
	require.Equal(t, cfg.GetRunner().GetID(), j.RunnerID)
	require.Contains(t, j.Output, "ran on jit-1")
	require.Contains(t, j.Output, filepath.Join(dir, "_work", "app", "app"))
	j, _ = s.Job(second)
	require.Equal(t, "queued", j.Status, "a just-in-time runner takes one job")
	require.Contains(t, p.stdout.String(), "√ Connected to GitHub")
	require.Contains(t, p.stdout.String(), "Listening for Jobs")
	require.Contains(t, p.stdout.String(), "Running job: job-")
	require.Contains(t, p.stdout.String(), "completed with result: Succeeded")
	runners, _, err := client(t, s, "admin-token").Actions.ListRunners(ctx, "octo", "app", nil)
	require.NoError(t, err)
	require.Zero(t, runners.TotalCount, "GitHub removes an ephemeral runner after its job")
	for _, f := range []string{".runner", ".credentials"} {
		require.NoFileExists(t, filepath.Join(dir, f))
	}

	again := startRun(t, dir, env)
	require.Equal(t, 1, again.wait(t), "a configuration whose runner is gone")
	require.Contains(t, again.stderr.String(), "runner not registered")

	// Stopped before any job: offline, exit 0; the configuration's one session is spent.
	idle := jitConfig(t, s, "octo/app", "jit-2", 1, "never-queued")
	p = startRun(t, dir, "ACTIONS_RUNNER_INPUT_JITCONFIG="+idle.GetEncodedJITConfig())
	require.Eventually(t, func() bool {
		rs := s.Runners("octo/app")
		return len(rs) == 1 && rs[0].Status == "online"
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	require.Equal(t, 0, p.wait(t), p.stderr.String())
	require.Equal(t, "offline", s.Runners("octo/app")[0].Status)
	again = startRun(t, dir, "ACTIONS_RUNNER_INPUT_JITCONFIG="+idle.GetEncodedJITConfig())
	require.Equal(t, 1, again.wait(t), "a spent configuration")
	require.Contains(t, again.stderr.String(), "409")
	require.Contains(t, again.stderr.String(), "one session")

	// --jitconfig on the command line works as the environment does.
	flagged := jitConfig(t, s, "octo/app", "jit-3", 1, "jit")
	out, err := sh(t, dir, "run.sh", "--jitconfig", flagged.GetEncodedJITConfig())
	require.NoError(t, err, out)
	j, err = s.WaitJob(ctx, second)
	require.NoError(t, err)
	require.Equal(t, "jit-3", j.RunnerName)
}

// TestJITOrgRunnerGroup: an organisation's just-in-time runner in a group limited to some
// repositories takes only their jobs.
func TestJITOrgRunnerGroup(t *testing.T) {
	t.Parallel()
	s := ghfake.New("admin-token")
	defer s.Close()
	ctx := testCtx(t)
	s.SetGroup("hangar", "octo/allowed")
	groups, _, err := client(t, s, "admin-token").Actions.ListOrganizationRunnerGroups(ctx, "octo", nil)
	require.NoError(t, err)
	var id int64
	for _, g := range groups.RunnerGroups {
		if g.GetName() == "hangar" {
			id = g.GetID()
		}
	}
	require.NotZero(t, id)
	cfg := jitConfig(t, s, "octo", "jit-org", id, "org-label")
	denied := s.QueueJob("octo/denied", []string{"org-label"}, "echo denied")
	allowed := s.QueueJob("octo/allowed", []string{"org-label"}, "echo allowed")

	p := startRun(t, runnerDir(t), "ACTIONS_RUNNER_INPUT_JITCONFIG="+cfg.GetEncodedJITConfig())
	require.Equal(t, 0, p.wait(t), p.stderr.String())
	j, err := s.WaitJob(ctx, allowed)
	require.NoError(t, err)
	require.Equal(t, "jit-org", j.RunnerName)
	require.Equal(t, "success", j.Conclusion)
	j, _ = s.Job(denied)
	require.Equal(t, "queued", j.Status, "the group does not allow octo/denied")
	require.Empty(t, s.Runners("octo"))
}

// TestDecodeJITConfig: only the stand-in's own configurations decode.
func TestDecodeJITConfig(t *testing.T) {
	t.Parallel()
	good := ghfake.JITConfig{URL: "http://127.0.0.1:1/octo/app", ID: 7, Name: "r", Credential: "CRED", Labels: []string{"x"}, Work: "_work"}
	got, err := ghfake.DecodeJITConfig(good.Encode())
	require.NoError(t, err)
	require.Equal(t, good, got)
	for name, encoded := range map[string]string{
		"not base64":    "%%%",
		"not JSON":      "bm90IGpzb24=",
		"no credential": ghfake.JITConfig{URL: "http://127.0.0.1:1/octo", ID: 7}.Encode(),
	} {
		_, err := ghfake.DecodeJITConfig(encoded)
		require.Error(t, err, name)
	}
}
