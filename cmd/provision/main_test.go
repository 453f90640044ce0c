package main_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// baseEnv is a valid set of inputs and context, as a workflow would give them.
func baseEnv() map[string]string {
	return map[string]string{
		"HANGAR_POOL": "linux-x64", "HANGAR_INSTANCE_COUNT": "2", "HANGAR_GITHUB_TOKEN": "ghs_test",
		"GITHUB_RUN_ID": "123456", "GITHUB_RUN_ATTEMPT": "1", "GITHUB_REPOSITORY": "octo/app",
		"GITHUB_SERVER_URL": "https://github.com", "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
	}
}

// cleanEnviron is the test's environment without anything that would feed the command inputs.
func cleanEnviron() []string { return testbed.Environ("HANGAR_", "GITHUB_", "INPUT_", "AWS_") }

// TestBadInputs: every bad input is refused with a message that names the input and what it
// accepts, and no request reaches AWS or GitHub.
func TestBadInputs(t *testing.T) {
	t.Parallel()
	bin := testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/provision")
	trap := testbed.NewTrap(t)

	tests := []struct {
		name, key, value string
		want             []string // substrings of the error
	}{
		{"no pool", "HANGAR_POOL", "", []string{"pool: empty", "want the name of a pool"}},
		{"malformed pool", "HANGAR_POOL", "Linux_X64", []string{"pool:", `"Linux_X64" is malformed`}},
		{"zero count", "HANGAR_INSTANCE_COUNT", "0", []string{"instance-count: 0: want 1 to 100"}},
		{"negative count", "HANGAR_INSTANCE_COUNT", "-1", []string{"instance-count: -1"}},
		{"too many", "HANGAR_INSTANCE_COUNT", "101", []string{"instance-count: 101: want 1 to 100"}},
		{"count not a number", "HANGAR_INSTANCE_COUNT", "three", []string{`instance-count: "three": want a whole number`}},
		{"usage class", "HANGAR_USAGE_CLASS", "cheap", []string{`usage-class: "cheap": want spot, on-demand or spot-fallback`}},
		{"type pattern", "HANGAR_ALLOWED_INSTANCE_TYPES", "c[5]*", []string{"allowed-instance-types:", `"c[5]*" is malformed`}},
		{"negative vcpu", "HANGAR_MIN_VCPU", "-2", []string{"min-vcpu: -2: want 0 to 1024"}},
		{"vcpu not a number", "HANGAR_MIN_VCPU", "x", []string{`min-vcpu: "x": want a whole number`}},
		{"negative memory", "HANGAR_MIN_MEMORY_MIB", "-1", []string{"min-memory-mib: -1"}},
		{"runtime syntax", "HANGAR_MAX_RUNTIME", "forever", []string{`max-runtime: "forever": want a duration`}},
		{"runtime too short", "HANGAR_MAX_RUNTIME", "10s", []string{"max-runtime: 10s: want a duration of at least 1m"}},
		{"timeout too short", "HANGAR_REGISTRATION_TIMEOUT", "1s", []string{"registration-timeout: 1s: want 10s to 1h0m0s"}},
		{"timeout too long", "HANGAR_REGISTRATION_TIMEOUT", "2h", []string{"registration-timeout: 2h0m0s"}},
		{"scope", "HANGAR_RUNNER_SCOPE", "enterprise", []string{`runner-scope: "enterprise": want repo or org`}},
		{"label", "HANGAR_LABELS", "gpu,bad label!", []string{`labels: "label!"`}},
		{"numeric label", "HANGAR_LABELS", "gpu,4242", []string{`labels: "4242": all digits could name another run`}},
		{"reserved tag", "HANGAR_TAGS", "hangar:pool=x", []string{`tags: "hangar:pool": the hangar: prefix is reserved`}},
		{"aws tag", "HANGAR_TAGS", "aws:cost=1", []string{`tags: "aws:cost"`}},
		{"tag without value", "HANGAR_TAGS", "team", []string{`tags: "team": want key=value pairs`}},
		{"no token", "HANGAR_GITHUB_TOKEN", "", []string{"github-token: empty"}},
		{"run id", "GITHUB_RUN_ID", "abc", []string{`GITHUB_RUN_ID: run id "abc" is malformed`}},
		{"no run id", "GITHUB_RUN_ID", "", []string{"GITHUB_RUN_ID: run id is empty"}},
		{"attempt", "GITHUB_RUN_ATTEMPT", "0", []string{"GITHUB_RUN_ATTEMPT: 0: want 1 or more"}},
		{"repository", "GITHUB_REPOSITORY", "noslash", []string{`GITHUB_REPOSITORY: repository "noslash": want owner/name`}},
		{"server url", "GITHUB_SERVER_URL", "ftp://example.com", []string{`GITHUB_SERVER_URL: "ftp://example.com": want an https URL`}},
		{"plain http server", "GITHUB_SERVER_URL", "http://github.example.com", []string{`GITHUB_SERVER_URL: "http://github.example.com": want an https URL`}},
		{"stack", "HANGAR_STACK", "bad stack", []string{`stack: "bad stack"`}},
		{"zero timeout", "HANGAR_REGISTRATION_TIMEOUT", "0", []string{`registration-timeout: "0": want a duration above zero`}},
		{"zero runtime", "HANGAR_MAX_RUNTIME", "0s", []string{`max-runtime: "0s": want a duration above zero`}},
	}
	require.GreaterOrEqual(t, len(tests), 20)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := baseEnv()
			env[tc.key] = tc.value
			env["AWS_ENDPOINT_URL"], env["AWS_ENDPOINT_URL_DYNAMODB"], env["GITHUB_API_URL"] = trap.URL, trap.URL, trap.URL
			cmd := exec.Command(bin) // a local world build: the trap, a plain-http loopback server, is acceptable
			cmd.Env = testbed.WithEnv(cleanEnviron(), env)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s", out)
			require.Equal(t, 2, exit.ExitCode(), "%s", out)
			require.Contains(t, string(out), "::error::provision: ")
			for _, w := range tc.want {
				require.Contains(t, string(out), w)
			}
		})
	}
}

// TestLoopbackGitHubOnlyInLocalWorldBuilds: a release build (no localworld tag) refuses a
// plain-http GitHub on a loopback address (the local stand-in); no flag, input or variable turns
// that on, and the flag that once did is gone.
func TestLoopbackGitHubOnlyInLocalWorldBuilds(t *testing.T) {
	t.Parallel()
	bin := testbuild.ProductionBinary(t, "github.com/hangar-ci/hangar/cmd/provision")
	trap := testbed.NewTrap(t)
	for _, extra := range [][]string{nil, {"HANGAR_ALLOW_LOOPBACK_GITHUB=true", "INPUT_ALLOW-LOOPBACK-GITHUB=true"}} {
		env := baseEnv()
		env["AWS_ENDPOINT_URL"], env["AWS_ENDPOINT_URL_DYNAMODB"] = trap.URL, trap.URL
		env["GITHUB_SERVER_URL"], env["GITHUB_API_URL"] = trap.URL, trap.URL
		cmd := exec.Command(bin)
		cmd.Env = testbed.WithEnv(append(cleanEnviron(), extra...), env)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%s", out)
		require.Equal(t, 2, exit.ExitCode(), "%s", out)
		require.Contains(t, string(out), `GITHUB_SERVER_URL: "`+trap.URL+`": want an https URL`)
		require.Contains(t, string(out), `GITHUB_API_URL: "`+trap.URL+`": want an https URL`)
	}
	out, err := exec.Command(bin, "--allow-loopback-github").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "flag provided but not defined: -allow-loopback-github")
}

// TestIdentityOnlyFromTheWorkflow: inside a workflow run (GITHUB_ACTIONS=true) the run id,
// attempt, repository and GitHub's URLs come only from GITHUB_*; a HANGAR_* variable a job set
// for later steps through $GITHUB_ENV is refused before any request, naming both values.
func TestIdentityOnlyFromTheWorkflow(t *testing.T) {
	t.Parallel()
	bin := testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/provision")
	trap := testbed.NewTrap(t)
	tests := []struct{ key, value, want string }{
		{"HANGAR_RUN_ID", "999", `run-id: HANGAR_RUN_ID says "999", the workflow's GITHUB_RUN_ID is "123456"`},
		{"HANGAR_RUN_ATTEMPT", "7", `run-attempt: HANGAR_RUN_ATTEMPT says "7", the workflow's GITHUB_RUN_ATTEMPT is "1"`},
		{"HANGAR_REPOSITORY", "octo/allowed", `repository: HANGAR_REPOSITORY says "octo/allowed", the workflow's GITHUB_REPOSITORY is "octo/app"`},
		{"HANGAR_API_URL", "https://attacker.example", `api-url: HANGAR_API_URL says "https://attacker.example"`},
		{"HANGAR_SERVER_URL", "https://attacker.example", `server-url: HANGAR_SERVER_URL says "https://attacker.example"`},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			t.Parallel()
			env := baseEnv()
			env["GITHUB_ACTIONS"], env[tc.key] = "true", tc.value
			env["AWS_ENDPOINT_URL"], env["AWS_ENDPOINT_URL_DYNAMODB"], env["GITHUB_API_URL"] = trap.URL, trap.URL, "https://api.github.com"
			cmd := exec.Command(bin)
			cmd.Env = testbed.WithEnv(cleanEnviron(), env)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s", out)
			require.Equal(t, 2, exit.ExitCode(), "%s", out)
			require.Contains(t, string(out), tc.want)
		})
	}
}

// TestCancelledMidway: provision is cancelled (as a cancelled workflow does, by signal) after it
// has launched instances; every launched instance has an item, and nothing is left running.
func TestCancelledMidway(t *testing.T) {
	t.Parallel()
	testbed.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The agents take ten seconds to look at their items: provision is still waiting when cancelled.
	e, err := localenv.Start(ctx, localenv.Options{Stack: testbed.Name(t, "cancel"), Baked: true, AgentArgs: []string{"--poll-interval", "10s"}})
	require.NoError(t, err)
	defer e.Close()

	bin := testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/provision")
	env := baseEnv()
	env["HANGAR_STACK"], env["HANGAR_POOL"], env["HANGAR_INSTANCE_COUNT"] = e.Stack, e.Pool, "3"
	env["GITHUB_SERVER_URL"], env["GITHUB_API_URL"], env["HANGAR_GITHUB_TOKEN"] = e.GH.URL(), e.GH.URL(), localenv.AdminToken
	env["GITHUB_RUN_ID"] = "8801"
	cmd := exec.Command(bin)
	cmd.Env = testbed.WithEnv(os.Environ(), env)
	var out testbed.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())

	launched := func() []string {
		res, err := e.EC2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
			{Name: aws.String("tag:hangar:run-id"), Values: []string{"8801"}}, {Name: aws.String("tag:hangar:stack"), Values: []string{e.Stack}}}})
		require.NoError(t, err)
		var ids []string
		for _, r := range res.Reservations {
			for _, in := range r.Instances {
				ids = append(ids, aws.ToString(in.InstanceId))
			}
		}
		return ids
	}
	deadline := time.Now().Add(time.Minute)
	for len(launched()) < 3 {
		require.True(t, time.Now().Before(deadline), "nothing launched:\n%s", out.String())
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "provision was cancelled, it must fail: %s", out.String())

	ids := launched()
	items, err := e.Store.GetMany(ctx, ids)
	require.NoError(t, err)
	require.Len(t, items, len(ids), "every launched instance has an item")
	for id, it := range items {
		require.Equal(t, state.Terminated, it.State, "%s: given back by the cancelled provision", id)
	}
	res, err := e.EC2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
	require.NoError(t, err)
	for _, r := range res.Reservations {
		for _, in := range r.Instances {
			require.Contains(t, []ec2types.InstanceStateName{ec2types.InstanceStateNameTerminated, ec2types.InstanceStateNameShuttingDown},
				in.State.Name, "%s is still %s", aws.ToString(in.InstanceId), in.State.Name)
		}
	}
	require.Empty(t, e.GH.Runners(""))
}

// TestPreRunnerLogInSummary: a pre-runner script's output (in the failed agent's log tail) reaches
// the step summary only when the pool's runner.logInSummary lets it for the repository's
// visibility, read from the workflow's event payload: by default (auto) private repositories see
// it and public ones, or ones whose payload says nothing, do not; never and always say so.
func TestPreRunnerLogInSummary(t *testing.T) {
	t.Parallel()
	testbed.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e, err := localenv.Start(ctx, localenv.Options{Stack: testbed.Name(t, "prelog"), Baked: true, AgentArgs: []string{"--poll-interval", "250ms"},
		PreRunner: "echo PRE-RUNNER-SECRET-OUTPUT; exit 3"})
	require.NoError(t, err)
	defer e.Close()
	bin := testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/provision")

	for i, tc := range []struct {
		name, setting, payload string
		shown                  bool
	}{
		{"auto, public", "", `{"repository":{"full_name":"octo/app","private":false,"visibility":"public"}}`, false},
		{"auto, private", "auto", `{"repository":{"full_name":"octo/app","private":true,"visibility":"private"}}`, true},
		{"auto, no payload", "", "", false},
		{"never, private", "never", `{"repository":{"private":true}}`, false},
		{"always, public", "always", `{"repository":{"private":false}}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, e.UpdatePool(ctx, func(d *pooldoc.Document) { d.Runner.LogInSummary = tc.setting }))
			dir := t.TempDir()
			env := append(e.StepEnv(strconv.Itoa(9100+i), 1, dir), "HANGAR_REGISTRATION_TIMEOUT=20s")
			if tc.payload != "" {
				event := filepath.Join(dir, "event.json")
				require.NoError(t, os.WriteFile(event, []byte(tc.payload), 0o600))
				env = append(env, "GITHUB_EVENT_PATH="+event)
			}
			res, err := localenv.RunStep(ctx, bin, env, dir)
			require.Error(t, err, "every instance fails its pre-runner script")
			require.Contains(t, res.Summary, "Instances given up on", res.Summary)
			if tc.shown {
				require.Contains(t, res.Summary, "PRE-RUNNER-SECRET-OUTPUT", "the pool shows the log tail here")
			} else {
				require.NotContains(t, res.Summary, "PRE-RUNNER-SECRET-OUTPUT", "the pool keeps the log tail out of this summary")
				require.Contains(t, res.Summary, "runner.logInSummary")
			}
		})
	}
}
