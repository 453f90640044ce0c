package host

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestJobGuardScript runs the hook the agent writes, with bash as the runner does, against the
// GITHUB_* variables of a job.
func TestJobGuardScript(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		guard      jobGuard
		run, repo  string
		accept     bool
		wantOutput string
	}{
		{"the run's own job", jobGuard{Run: "42", Repo: "octo/app"}, "42", "octo/app", true, "accepted"},
		{"the repository in another case", jobGuard{Run: "42", Repo: "Octo/App"}, "42", "OCTO/app", true, "accepted"},
		{"another run of the repository", jobGuard{Run: "42", Repo: "octo/app"}, "43", "octo/app", false, "this runner serves run 42 of octo/app only, not run 43 of octo/app"},
		{"a run id that only starts like it", jobGuard{Run: "42", Repo: "octo/app"}, "421", "octo/app", false, "job refused"},
		{"no run id", jobGuard{Run: "42", Repo: "octo/app"}, "", "octo/app", false, "job refused"},
		{"another repository of the run id", jobGuard{Run: "42", Repo: "octo/app"}, "42", "octo/other", false, "not run 42 of octo/other"},
		{"a repository that only starts like it", jobGuard{Run: "42", Repo: "octo/app"}, "42", "octo/app2", false, "job refused"},
		{"no repository", jobGuard{Run: "42", Repo: "octo/app"}, "42", "", false, "job refused"},
		{"repository only: any run of it", jobGuard{Repo: "octo/app"}, "99", "octo/app", true, "accepted"},
		{"repository only: another repository", jobGuard{Repo: "octo/app"}, "99", "evil/app", false, "serves octo/app only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path, err := tc.guard.write(t.TempDir())
			require.NoError(t, err)
			st, err := os.Stat(path)
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o555), st.Mode().Perm(), "read-only, runnable")
			cmd := exec.Command("bash", "-e", path)
			cmd.Env = []string{"PATH=/usr/bin:/bin"}
			if tc.run != "" {
				cmd.Env = append(cmd.Env, "GITHUB_RUN_ID="+tc.run)
			}
			if tc.repo != "" {
				cmd.Env = append(cmd.Env, "GITHUB_REPOSITORY="+tc.repo)
			}
			out, err := cmd.CombinedOutput()
			if tc.accept {
				require.NoError(t, err, "%s", out)
			} else {
				require.Error(t, err, "%s", out)
			}
			require.Contains(t, string(out), tc.wantOutput)
		})
	}
}

// TestJobGuardRefusesMalformedValues: nothing but a run id and an owner/name repository reaches
// the script.
func TestJobGuardRefusesMalformedValues(t *testing.T) {
	t.Parallel()
	for _, g := range []jobGuard{
		{Run: "42'; rm -rf / #", Repo: "octo/app"},
		{Run: "0042", Repo: "octo/app"},
		{Run: "42", Repo: "octo/app'$(id)"},
		{Run: "42", Repo: "octo"},
		{Run: "42", Repo: "octo/app/x"},
		{Run: "42", Repo: ""},
		{Repo: "-o/app"},
	} {
		_, err := g.script()
		require.Error(t, err, "%+v", g)
		dir := t.TempDir()
		_, err = g.write(dir)
		require.Error(t, err, "%+v", g)
		require.NoFileExists(t, filepath.Join(dir, jobGuardFile))
	}
}

// TestWithJobStartedHook: the hook variable is set once, replacing any earlier setting.
func TestWithJobStartedHook(t *testing.T) {
	t.Parallel()
	env := []string{"HOME=/home/r", jobStartedHookVar + "=/tmp/evil.sh"}
	got := withJobStartedHook(env, "/var/lib/hangar/runs/1-1/job-started.sh")
	require.Equal(t, []string{"HOME=/home/r", jobStartedHookVar + "=/var/lib/hangar/runs/1-1/job-started.sh"}, got)
	require.Equal(t, "/tmp/evil.sh", env[1][len(jobStartedHookVar)+1:], "the caller's slice is left alone")
}
