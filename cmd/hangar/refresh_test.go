package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestRefreshStep runs the action's refresh mode (hangar refresh) against the stack's refresh
// function served by the local Lambda: a dry run reports the expired instance it would terminate,
// in the report output and the step summary, and changes nothing; the real run terminates it;
// an unknown pool is refused by the function with the stack's pools named, nothing changed.
func TestRefreshStep(t *testing.T) {
	t.Parallel()
	testbed.Require(t)
	bootstrap := testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/refresh")
	bin := testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/hangar")
	startCtx, cancelStart := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancelStart()
	e, err := localenv.Start(startCtx, localenv.Options{Stack: testbed.Name(t, "invoke"), Baked: true})
	require.NoError(t, err)
	defer e.Close()
	fn, err := e.ServeRefresh(bootstrap)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	expired, err := e.Launch(ctx, time.Now().Add(-time.Second))
	require.NoError(t, err)

	dir := t.TempDir()
	env := func(kv ...string) []string { return append(e.StepEnv("1", 1, dir), kv...) }
	res, err := localenv.RunRefreshStep(ctx, bin, env("HANGAR_DRY_RUN=true"), dir)
	require.NoError(t, err, "%s\n%s", res.Log, fn.Logs())
	var rep struct {
		DryRun  bool `json:"dryRun"`
		Actions []struct{ Instance, Do, Reason string }
		Pools   []struct {
			Pool    string
			Expired int
		}
	}
	require.NoError(t, json.Unmarshal([]byte(res.Outputs["report"]), &rep), res.Outputs["report"])
	require.True(t, rep.DryRun)
	require.Len(t, rep.Pools, 1)
	require.Equal(t, e.Pool, rep.Pools[0].Pool)
	require.Equal(t, 1, rep.Pools[0].Expired)
	require.Contains(t, rep.Actions, struct{ Instance, Do, Reason string }{expired, "terminate", rep.Actions[0].Reason})
	require.Contains(t, res.Summary, "### Hangar: refresh of stack "+e.Stack+" (dry run")
	require.Contains(t, res.Summary, "| "+e.Pool+" | ")
	require.Contains(t, res.Summary, "| terminate | "+expired+" | "+e.Pool+" | ")
	it, err := e.Store.Get(ctx, expired)
	require.NoError(t, err)
	require.Equal(t, state.Created, it.State, "a dry run changes nothing")

	res, err = localenv.RunRefreshStep(ctx, bin, env("HANGAR_POOLS=nope"), dir)
	require.Error(t, err)
	require.Contains(t, res.Log, `the refresh function `+e.Stack+`-refresh failed (Unhandled): pools: "nope" is not a pool of stack `+e.Stack+` (its pools: `+e.Pool+`)`)
	it, err = e.Store.Get(ctx, expired)
	require.NoError(t, err)
	require.Equal(t, state.Created, it.State)

	res, err = localenv.RunRefreshStep(ctx, bin, env("HANGAR_POOLS="+e.Pool), dir)
	require.NoError(t, err, "%s\n%s", res.Log, fn.Logs())
	require.Contains(t, res.Summary, "| terminate | "+expired)
	it, err = e.Store.Get(ctx, expired)
	require.NoError(t, err)
	require.Equal(t, state.Terminated, it.State)
	require.Equal(t, 3, fn.Invocations())
}

// TestRefreshBadInputs: bad refresh inputs are refused, naming the input and what it accepts,
// before any request.
func TestRefreshBadInputs(t *testing.T) {
	t.Parallel()
	bin := testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/hangar")
	trap := testbed.NewTrap(t)
	tests := []struct{ key, value, want string }{
		{"HANGAR_DRY_RUN", "maybe", `dry-run: "maybe": want true or false`},
		{"HANGAR_POOLS", "ok,Bad_Pool", `pools: pool name "Bad_Pool" is malformed: want 1 to 48 of a-z, 0-9 and '-'`},
		{"HANGAR_STACK", "no spaces", `stack: "no spaces"`},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(bin, "refresh")
			cmd.Env = testbed.WithEnv(testbed.Environ("HANGAR_", "GITHUB_", "INPUT_", "AWS_"), map[string]string{
				tc.key: tc.value, "AWS_ENDPOINT_URL": trap.URL, "AWS_REGION": "us-east-1",
				"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"})
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			require.True(t, errors.As(err, &exit), "%s", out)
			require.Equal(t, 2, exit.ExitCode(), "%s", out)
			require.Contains(t, string(out), tc.want)
		})
	}
}
