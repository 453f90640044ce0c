package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/poolconfig"
	"github.com/hangar-ci/hangar/pkg/state"
)

// runtimeAPI is a local Lambda Runtime API (2018-06-01): it hands the function one event at a
// time and collects the response or error of each.
type runtimeAPI struct {
	srv     *httptest.Server
	events  chan invocation
	mu      sync.Mutex
	results map[string]chan result
}

type invocation struct {
	id   string
	body []byte
}

type result struct {
	body  []byte
	error bool
}

func newRuntimeAPI() *runtimeAPI {
	r := &runtimeAPI{events: make(chan invocation), results: map[string]chan result{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", func(w http.ResponseWriter, req *http.Request) {
		select {
		case inv := <-r.events:
			w.Header().Set("Lambda-Runtime-Aws-Request-Id", inv.id)
			w.Header().Set("Lambda-Runtime-Deadline-Ms", fmt.Sprint(time.Now().Add(time.Minute).UnixMilli()))
			w.Header().Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:123456789012:function:hangar-refresh")
			_, _ = w.Write(inv.body)
		case <-req.Context().Done():
		}
	})
	reply := func(isErr bool) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) {
			b, _ := io.ReadAll(req.Body)
			r.mu.Lock()
			ch := r.results[req.PathValue("id")]
			r.mu.Unlock()
			ch <- result{body: b, error: isErr}
			w.WriteHeader(http.StatusAccepted)
		}
	}
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", reply(false))
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", reply(true))
	r.srv = httptest.NewServer(mux)
	return r
}

// invoke sends an event and waits for the function's answer.
func (r *runtimeAPI) invoke(t *testing.T, event string) result {
	t.Helper()
	id := fmt.Sprintf("req-%d", time.Now().UnixNano())
	ch := make(chan result, 1)
	r.mu.Lock()
	r.results[id] = ch
	r.mu.Unlock()
	select {
	case r.events <- invocation{id: id, body: []byte(event)}:
	case <-time.After(30 * time.Second):
		t.Fatal("the function did not ask for the next event")
	}
	select {
	case res := <-ch:
		return res
	case <-time.After(90 * time.Second):
		t.Fatal("no answer from the function")
	}
	return result{}
}

// buildBootstrap builds the refresh command as a Lambda bootstrap.
func buildBootstrap(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "bootstrap")
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "lambda.norpc", "-ldflags", "-s -w", "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	return out
}

// TestLambdaBootstrap drives the real bootstrap through the Runtime API: a malformed event is
// refused with nothing changed, a scheduled event refreshes, a manual invoke returns its report,
// a spot interruption warning marks the instance terminated.
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
	require.NoError(t, e.UpdatePool(ctx, func(d *poolconfig.Document) {
		d.Warm = poolconfig.Warm{Schedules: []poolconfig.Schedule{{Name: "default", Hot: 1}}}
	}))
	expired, err := e.Launch(ctx, time.Now().Add(-time.Second))
	require.NoError(t, err)

	api := newRuntimeAPI()
	defer api.srv.Close()
	fn := exec.Command(bootstrap)
	fn.Env = append(os.Environ(), "AWS_LAMBDA_RUNTIME_API="+strings.TrimPrefix(api.srv.URL, "http://"), "HANGAR_STACK="+e.Stack,
		"AWS_LAMBDA_FUNCTION_NAME=hangar-refresh", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256")
	var logs testbed.Buffer
	fn.Stdout, fn.Stderr = &logs, &logs
	require.NoError(t, fn.Start())
	defer func() { _ = fn.Process.Kill(); _ = fn.Wait() }()

	for _, bad := range []string{`not json`, `{"source":"aws.events","detail-type":"Something Else"}`,
		`{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{}}`,
		`{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":"i-nope"}}`,
		`{"source":"aws.ec2","detail-type":"EC2 Instance State-change Notification","detail":{"instance-id":"i-0123456789abcdef0"}}`,
		`{"source":"aws.ec2","detail-type":"EC2 Instance State-change Notification","detail":{"instance-id":"i-0123456789abcdef0","state":"exploded"}}`} {
		res := api.invoke(t, bad)
		require.True(t, res.error, "%s was accepted: %s", bad, res.body)
		require.Regexp(t, `malformed|unrecognised`, string(res.body), bad)
	}
	it, err := e.Store.Get(ctx, expired)
	require.NoError(t, err)
	require.Equal(t, state.Created, it.State, "malformed events change nothing")

	res := api.invoke(t, `{"version":"0","id":"1","detail-type":"Scheduled Event","source":"aws.events","account":"123456789012","time":"2026-11-22T00:00:00Z","region":"us-east-1","resources":[],"detail":{}}`)
	require.False(t, res.error, "%s\n%s", res.body, logs.String())
	it, err = e.Store.Get(ctx, expired)
	require.NoError(t, err)
	require.Equal(t, state.Terminated, it.State, "the scheduled refresh expired it")

	res = api.invoke(t, `{"action":"refresh","dryRun":true}`)
	require.False(t, res.error, "%s", res.body)
	var report struct {
		DryRun bool `json:"dryRun"`
		Pools  []struct {
			Pool    string `json:"pool"`
			Idle    int    `json:"idle"`
			Warming int    `json:"warming"`
		} `json:"pools"`
	}
	require.NoError(t, json.Unmarshal(res.body, &report))
	require.True(t, report.DryRun)
	require.Len(t, report.Pools, 1)
	require.Equal(t, 1, report.Pools[0].Warming+report.Pools[0].Idle, "the scheduled refresh launched the warm instance (warming, or ready to promote)")

	warm, err := e.Store.InPoolState(ctx, e.Pool, state.Created)
	require.NoError(t, err)
	require.Len(t, warm, 1, "the dry run promoted nothing")
	res = api.invoke(t, fmt.Sprintf(`{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":%q,"instance-action":"terminate"}}`, warm[0].ID))
	require.False(t, res.error, "%s", res.body)
	it, err = e.Store.Get(ctx, warm[0].ID)
	require.NoError(t, err)
	require.Equal(t, state.Terminated, it.State)
	require.Contains(t, logs.String(), `"CloudWatchMetrics"`, "metrics go to the function's log")
}
