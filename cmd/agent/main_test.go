package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/instance/agent"
)

// clearHangarEnv unsets every HANGAR_* variable for the test (restored after it).
func clearHangarEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "HANGAR_") {
			t.Setenv(k, "") // registers the restore
			require.NoError(t, os.Unsetenv(k))
		}
	}
}

func TestParseReadsTheEnvironment(t *testing.T) {
	required := []string{"--stack", "prod", "--pool", "linux-x64"}
	for _, tc := range []struct {
		name  string
		env   map[string]string
		args  []string
		check func(t *testing.T, o options)
	}{
		{"defaults", nil, required, func(t *testing.T, o options) {
			require.Equal(t, agent.DefaultPollInterval, o.poll)
			require.Equal(t, agent.DefaultHeartbeatInterval, o.heartbeat)
			require.Equal(t, agent.DefaultTerminateGrace, o.grace)
			require.Equal(t, time.Duration(0), o.bootWait)
			require.Equal(t, agent.DefaultSpotInterval, o.spot)
			require.Equal(t, agent.DefaultRunnerDir, o.runnerDir)
			require.Equal(t, "json", o.logFormat)
		}},
		{"durations", map[string]string{"HANGAR_POLL_INTERVAL": "500ms", "HANGAR_HEARTBEAT_INTERVAL": "1m",
			"HANGAR_TERMINATE_GRACE": "90s", "HANGAR_BOOT_WAIT": "5m", "HANGAR_SPOT_INTERVAL": "2s"}, required,
			func(t *testing.T, o options) {
				require.Equal(t, 500*time.Millisecond, o.poll)
				require.Equal(t, time.Minute, o.heartbeat)
				require.Equal(t, 90*time.Second, o.grace)
				require.Equal(t, 5*time.Minute, o.bootWait)
				require.Equal(t, 2*time.Second, o.spot)
			}},
		{"an empty duration is unset", map[string]string{"HANGAR_POLL_INTERVAL": ""}, required, func(t *testing.T, o options) {
			require.Equal(t, agent.DefaultPollInterval, o.poll)
		}},
		{"a flag wins over its variable", map[string]string{"HANGAR_POLL_INTERVAL": "5s", "HANGAR_STACK": "other"},
			append([]string{"--poll-interval", "2s"}, required...), func(t *testing.T, o options) {
				require.Equal(t, 2*time.Second, o.poll)
				require.Equal(t, "prod", o.stack)
			}},
		{"strings", map[string]string{"HANGAR_STACK": "prod", "HANGAR_POOL": "linux-x64", "HANGAR_RUNNER_DIR": "/r",
			"HANGAR_RUNS_DIR": "/w", "HANGAR_STATE_DIR": "/s", "HANGAR_RUN_AS": "runner", "HANGAR_TMP_DIRS": "/tmp/a,/tmp/b", "HANGAR_LOG_FORMAT": "text",
			"HANGAR_SHUTDOWN_COMMAND": "poweroff -f", "HANGAR_POOL_DOCUMENT": "/etc/pool.json"}, nil,
			func(t *testing.T, o options) {
				require.Equal(t, options{stack: "prod", pool: "linux-x64", poolDocument: "/etc/pool.json", runnerDir: "/r", runsDir: "/w", stateDir: "/s",
					runAs: "runner", tmpDirs: "/tmp/a,/tmp/b", poll: agent.DefaultPollInterval, heartbeat: agent.DefaultHeartbeatInterval, safety: agent.DefaultSafetyInterval, doorbellWait: agent.DefaultDoorbellWait,
					grace: agent.DefaultTerminateGrace, spot: agent.DefaultSpotInterval, shutdown: "poweroff -f", logFormat: "text"}, o)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearHangarEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			o, err := parse(tc.args)
			require.NoError(t, err)
			tc.check(t, o)
		})
	}
}

func TestParseRefusesMalformedValues(t *testing.T) {
	required := []string{"--stack", "prod", "--pool", "linux-x64"}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want []string // each must be in the error
	}{
		{"poll interval", map[string]string{"HANGAR_POLL_INTERVAL": "5x"}, required,
			[]string{`HANGAR_POLL_INTERVAL: "5x": want a duration such as 1s or 2m`}},
		{"heartbeat interval without a unit", map[string]string{"HANGAR_HEARTBEAT_INTERVAL": "30"}, required,
			[]string{`HANGAR_HEARTBEAT_INTERVAL: "30": want a duration such as 1s or 2m`}},
		{"terminate grace", map[string]string{"HANGAR_TERMINATE_GRACE": "two minutes"}, required,
			[]string{`HANGAR_TERMINATE_GRACE: "two minutes": want a duration`}},
		{"boot wait", map[string]string{"HANGAR_BOOT_WAIT": "5m "}, required,
			[]string{`HANGAR_BOOT_WAIT: "5m ": want a duration`}},
		{"spot interval", map[string]string{"HANGAR_SPOT_INTERVAL": "-"}, required,
			[]string{`HANGAR_SPOT_INTERVAL: "-": want a duration`}},
		{"even when the flag is given too", map[string]string{"HANGAR_POLL_INTERVAL": "soon"},
			append([]string{"--poll-interval", "1s"}, required...), []string{`HANGAR_POLL_INTERVAL: "soon"`}},
		{"every bad variable is named", map[string]string{"HANGAR_POLL_INTERVAL": "1x", "HANGAR_SPOT_INTERVAL": "2y"}, required,
			[]string{`HANGAR_POLL_INTERVAL: "1x"`, `HANGAR_SPOT_INTERVAL: "2y"`}},
		{"log format", map[string]string{"HANGAR_LOG_FORMAT": "xml"}, required,
			[]string{`HANGAR_LOG_FORMAT`, `"xml": want json or text`}},
		{"empty shutdown command", map[string]string{"HANGAR_SHUTDOWN_COMMAND": " "}, required,
			[]string{"HANGAR_SHUTDOWN_COMMAND", "is empty"}},
		{"no stack", map[string]string{"HANGAR_POOL": "linux-x64"}, nil,
			[]string{"HANGAR_STACK", "required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearHangarEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := parse(tc.args)
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}
