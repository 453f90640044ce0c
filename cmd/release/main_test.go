package main_test

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
)

// TestBadInputs: release refuses bad inputs with a message naming the input, before any request.
func TestBadInputs(t *testing.T) {
	t.Parallel()
	bin := testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/release")
	trap := testbed.NewTrap(t)
	tests := []struct {
		name, key, value, want string
	}{
		{"no run id", "GITHUB_RUN_ID", "", "GITHUB_RUN_ID: run id is empty"},
		{"bad run id", "GITHUB_RUN_ID", "12x", `GITHUB_RUN_ID: run id "12x" is malformed`},
		{"timeout too long", "HANGAR_DEREGISTER_TIMEOUT", "2h", "deregister-timeout: 2h0m0s: want 1s to 1h0m0s"},
		{"zero timeout", "HANGAR_DEREGISTER_TIMEOUT", "0", `deregister-timeout: "0": want a duration above zero`},
		{"stack", "HANGAR_STACK", "bad stack", `stack: "bad stack": want the Hangar stack's name`},
		{"another run in a workflow", "HANGAR_RUN_ID", "999", `run-id: HANGAR_RUN_ID says "999", the workflow's GITHUB_RUN_ID is "77"`},
		{"plain http api", "GITHUB_API_URL", "http://api.example.com", `GITHUB_API_URL: "http://api.example.com": want an https URL`},
		{"no token", "HANGAR_GITHUB_TOKEN", "", "github-token: empty"},
		{"scope", "HANGAR_RUNNER_SCOPE", "team", `runner-scope "team": want repo or org`},
		{"repository", "GITHUB_REPOSITORY", "x", `repository "x": want owner/name`},
		{"timeout", "HANGAR_DEREGISTER_TIMEOUT", "soon", `deregister-timeout: "soon": want a duration`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// As in a workflow run: the identity comes only from GITHUB_*.
			env := map[string]string{"GITHUB_ACTIONS": "true", "HANGAR_GITHUB_TOKEN": "ghs_x", "GITHUB_RUN_ID": "77", "GITHUB_REPOSITORY": "octo/app",
				"AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": trap.URL, "AWS_ENDPOINT_URL_DYNAMODB": trap.URL, "GITHUB_API_URL": trap.URL}
			env[tc.key] = tc.value
			cmd := exec.Command(bin) // a local world build: the trap, a plain-http loopback server, is acceptable
			cmd.Env = testbed.WithEnv(testbed.Environ("HANGAR_", "GITHUB_", "INPUT_", "AWS_"), env)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s", out)
			require.Equal(t, 2, exit.ExitCode(), "%s", out)
			require.Contains(t, string(out), tc.want)
		})
	}
}
