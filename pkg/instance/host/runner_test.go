package host

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRegistered: a run's runner holds a registration under the name its .runner records (the
// real runner's agentName, with its byte-order mark, or the stand-in's name); a .runner that is a
// symlink out of the runner's directory counts for nothing.
func TestRegistered(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, write func(runner string)) *Run {
		base := t.TempDir()
		r := &Run{dirs: runDirsAt(base)}
		require.NoError(t, os.Mkdir(r.dirs.runner, 0o755))
		write(r.dirs.runner)
		return r
	}
	settings := func(body string) func(string) {
		return func(dir string) { require.NoError(t, os.WriteFile(filepath.Join(dir, ".runner"), []byte(body), 0o644)) }
	}
	r := run(t, settings("\xef\xbb\xbf{\"agentName\": \"hangar-i-1-42\", \"poolId\": 1}"))
	require.True(t, r.Registered("hangar-i-1-42"))
	require.False(t, r.Registered("hangar-i-1-43"), "another run's name")
	require.True(t, run(t, settings(`{"name": "hangar-i-1-42"}`)).Registered("hangar-i-1-42"), "the stand-in's")
	require.False(t, run(t, settings("not json")).Registered("hangar-i-1-42"))
	require.False(t, run(t, func(string) {}).Registered("hangar-i-1-42"), "no registration")

	outside := filepath.Join(t.TempDir(), "runner-settings")
	require.NoError(t, os.WriteFile(outside, []byte(`{"agentName": "hangar-i-1-42"}`), 0o644))
	require.False(t, run(t, func(dir string) { require.NoError(t, os.Symlink(outside, filepath.Join(dir, ".runner"))) }).Registered("hangar-i-1-42"),
		"a symlink the run left leads nowhere else")
}

// TestRunnerEnvironment: the registration token and a just-in-time configuration reach the
// runner through its environment, set once, and the caller's environment is left alone.
func TestRunnerEnvironment(t *testing.T) {
	t.Parallel()
	env := []string{"HOME=/home/r", jitConfigVar + "=stale"}
	got := withJITConfig(env, "cfg")
	require.Equal(t, []string{"HOME=/home/r", jitConfigVar + "=cfg"}, got)
	require.Equal(t, jitConfigVar+"=stale", env[1], "the caller's slice is left alone")
	require.True(t, slices.Contains(withToken(env, "AREG1"), "ACTIONS_RUNNER_INPUT_TOKEN=AREG1"))
	require.Len(t, env, 2)
}
