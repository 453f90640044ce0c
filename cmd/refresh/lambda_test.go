package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/lambdaemu"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// invoke hands the function an event and waits for its answer.
func invoke(t *testing.T, fn *lambdaemu.Emulator, event string) lambdaemu.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := fn.Invoke(ctx, []byte(event))
	require.NoError(t, err)
	return res
}

// buildBootstrap builds the refresh command as a Lambda bootstrap.
func buildBootstrap(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "bootstrap")
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "lambda.norpc,"+testbuild.Tags, "-ldflags", "-s -w", "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	return out
}

// TestLambdaBootstrap drives the real bootstrap through the Runtime API, as the stack's two
// functions: a malformed event is refused with nothing changed; the function the workflows may
// invoke refuses a well-formed spot interruption warning, state change and schedule with nothing
// changed (a workflow cannot forge EC2's events), and the events function a manual refresh; on
// the events function a scheduled event refreshes and a spot interruption warning marks the
// instance terminated; on the other, a manual invoke returns its report.
func TestLambdaBootstrap(t *testing.T) {
	t.Parallel()
	testbed.Require(t)
	// Building the bootstrap, the agent and the stand-in runner can take minutes on a busy
	// machine with a cold cache: the scenario's own deadline starts after them.
	bootstrap := buildBootstrap(t)
	startCtx, cancelStart := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancelStart()
	e, err := localenv.Start(startCtx, localenv.Options{Stack: testbed.Name(t, "lambda"), Baked: true})
	require.NoError(t, err)
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, e.UpdatePool(ctx, func(d *pooldoc.Document) {
		d.Warm = pooldoc.Warm{Schedules: []pooldoc.Schedule{{Name: "default", Hot: 1}}}
	}))
	expired, err := e.Launch(ctx, time.Now().Add(-time.Second))
	require.NoError(t, err)

	manual, err := lambdaemu.Start(lambdaemu.Function{Name: pooldoc.RefreshFunction(e.Stack), Bootstrap: bootstrap,
		Env: append(os.Environ(), "HANGAR_STACK="+e.Stack)})
	require.NoError(t, err)
	defer manual.Close()
	fn, err := lambdaemu.Start(lambdaemu.Function{Name: pooldoc.RefreshEventsFunction(e.Stack), Bootstrap: bootstrap,
		Env: append(os.Environ(), "HANGAR_STACK="+e.Stack, pooldoc.RefreshSourceEnv+"="+pooldoc.RefreshSourceEventBridge)})
	require.NoError(t, err)
	defer fn.Close()

	for _, bad := range []string{`not json`, `{"source":"aws.events","detail-type":"Something Else"}`,
		`{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{}}`,
		`{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":"i-nope"}}`,
		`{"source":"aws.ec2","detail-type":"EC2 Instance State-change Notification","detail":{"instance-id":"i-0123456789abcdef0"}}`,
		`{"source":"aws.ec2","detail-type":"EC2 Instance State-change Notification","detail":{"instance-id":"i-0123456789abcdef0","state":"exploded"}}`} {
		res := invoke(t, fn, bad)
		require.True(t, res.Error, "%s was accepted: %s", bad, res.Payload)
		require.Regexp(t, `malformed|unrecognised`, string(res.Payload), bad)
	}
	it, err := e.Store.Get(ctx, expired)
	require.NoError(t, err)
	require.Equal(t, state.Created, it.State, "malformed events change nothing")

	// Forged events on the function the workflows may invoke: refused, the instance untouched.
	for _, forged := range []string{
		fmt.Sprintf(`{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":%q,"instance-action":"terminate"}}`, expired),
		fmt.Sprintf(`{"source":"aws.ec2","detail-type":"EC2 Instance State-change Notification","detail":{"instance-id":%q,"state":"terminated"}}`, expired),
		`{"version":"0","id":"1","detail-type":"Scheduled Event","source":"aws.events","account":"123456789012","time":"2026-11-22T00:00:00Z","region":"us-east-1","resources":[],"detail":{}}`} {
		res := invoke(t, manual, forged)
		require.True(t, res.Error, "%s was accepted: %s", forged, res.Payload)
		require.Contains(t, string(res.Payload), "reach refresh only from EventBridge, through the function "+pooldoc.RefreshEventsFunction(e.Stack), forged)
	}
	it, err = e.Store.Get(ctx, expired)
	require.NoError(t, err)
	require.Equal(t, state.Created, it.State, "a forged event changes nothing: neither terminated nor expired")
	res := invoke(t, fn, `{"action":"refresh","dryRun":true}`)
	require.True(t, res.Error, "the events function took a manual refresh: %s", res.Payload)
	require.Contains(t, string(res.Payload), "refused a manual refresh: this is the events function")

	res = invoke(t, fn, `{"version":"0","id":"1","detail-type":"Scheduled Event","source":"aws.events","account":"123456789012","time":"2026-11-22T00:00:00Z","region":"us-east-1","resources":[],"detail":{}}`)
	require.False(t, res.Error, "%s\n%s", res.Payload, fn.Logs())
	it, err = e.Store.Get(ctx, expired)
	require.NoError(t, err)
	require.Equal(t, state.Terminated, it.State, "the scheduled refresh expired it")

	res = invoke(t, manual, `{"action":"refresh","dryRun":true}`)
	require.False(t, res.Error, "%s", res.Payload)
	var report struct {
		DryRun bool `json:"dryRun"`
		Pools  []struct {
			Pool    string `json:"pool"`
			Idle    int    `json:"idle"`
			Warming int    `json:"warming"`
		} `json:"pools"`
	}
	require.NoError(t, json.Unmarshal(res.Payload, &report))
	require.True(t, report.DryRun)
	require.Len(t, report.Pools, 1)
	require.Equal(t, 1, report.Pools[0].Warming+report.Pools[0].Idle, "the scheduled refresh launched the warm instance (warming, or ready to promote)")

	warm, err := e.Store.InPoolState(ctx, e.Pool, state.Created)
	require.NoError(t, err)
	require.Len(t, warm, 1, "the dry run promoted nothing")
	res = invoke(t, fn, fmt.Sprintf(`{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":%q,"instance-action":"terminate"}}`, warm[0].ID))
	require.False(t, res.Error, "%s", res.Payload)
	it, err = e.Store.Get(ctx, warm[0].ID)
	require.NoError(t, err)
	require.Equal(t, state.Terminated, it.State)
	require.Contains(t, fn.Logs(), `"CloudWatchMetrics"`, "metrics go to the function's log")
}
