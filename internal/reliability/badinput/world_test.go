package badinput

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/awsproxy"
	"github.com/hangar-ci/hangar/internal/testkit/lambdaemu"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// world is the local world the corpus runs in: one stack with one pool holding two idle
// instances, the step binaries, and counting proxies in front of every endpoint the steps and
// the refresh function use.
type world struct {
	*localenv.Env
	ctx context.Context
	dir string

	// refreshBin is the Lambda bootstrap (cmd/refresh); hangarBin runs the action's refresh step.
	provisionBin, releaseBin, refreshBin, hangarBin string

	moto, ddb *awsproxy.Proxy // AWS traffic of the steps and of the refresh function
	github    *githubCounter  // the steps' GitHub traffic
	fn        *lambdaemu.Emulator

	// idle are the pool's idle instances and the item versions they were left at: no case may
	// touch them.
	idle map[string]int64
	// poison is what became of the poison messages sent ahead of the first provision.
	poison poisonOutcome
	// agent is the live instance, outside the pool's queue, whose item the agent cases spoil.
	agent *agentInstance
}

// newWorld starts the world. The poison messages are sent to the pool's queue before the first
// provision, which must move them to the dead-letter queue and still create the instances that
// its release then leaves idle in the pool.
func newWorld(t *testing.T, poison []poisonCase) *world {
	t.Helper()
	// Building the binaries can take minutes on a busy machine with a cold cache: the world's
	// own deadline starts after them.
	w := &world{
		provisionBin: testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/provision"),
		releaseBin:   testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/release"),
		refreshBin:   testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/refresh"),
		hangarBin:    testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/hangar"),
		dir:          t.TempDir(),
	}
	phase := time.Now()
	lap := func(what string) {
		t.Logf("%s in %s", what, time.Since(phase).Round(time.Millisecond))
		phase = time.Now()
	}
	startCtx, cancelStart := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancelStart()
	e, err := localenv.Start(startCtx, localenv.Options{Stack: testbed.Name(t, "badin"), Baked: true,
		AgentArgs: []string{"--poll-interval", "250ms"}})
	require.NoError(t, err)
	w.Env = e
	lap("local world started")
	t.Cleanup(func() {
		if t.Failed() {
			for _, id := range e.Sim.Running() {
				t.Logf("agent log of %s:\n%s", id, e.Sim.AgentLog(id))
			}
		}
		e.Close()
	})
	// Generous: on a busy machine, with the emulators shared, the whole run can take minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	w.ctx = ctx

	w.moto, err = awsproxy.New(os.Getenv("AWS_ENDPOINT_URL"), 1)
	require.NoError(t, err)
	t.Cleanup(w.moto.Close)
	w.ddb, err = awsproxy.New(os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), 2)
	require.NoError(t, err)
	t.Cleanup(w.ddb.Close)
	w.github = newGitHubCounter(t, e.GH.URL())
	// The stack's refresh function, as the stack deploys it, with its AWS traffic counted.
	w.fn, err = lambdaemu.Start(lambdaemu.Function{Name: pooldoc.RefreshFunction(e.Stack), Bootstrap: w.refreshBin,
		Env:     append(e.Environ(), "HANGAR_STACK="+e.Stack, "AWS_ENDPOINT_URL="+w.moto.URL(), "AWS_ENDPOINT_URL_DYNAMODB="+w.ddb.URL()),
		Timeout: 2 * time.Minute})
	require.NoError(t, err)
	t.Cleanup(w.fn.Close)

	w.startAgentInstance(t) // it boots while the provision below runs
	w.poison = w.sendPoison(t, poison)
	res, err := localenv.RunStep(ctx, w.provisionBin, w.stepEnv("4100", 2, nil), w.dir)
	require.NoError(t, err, "the provision behind the poison messages failed")
	w.poison.provisionLog = res.Log
	w.poison.created = res.Outputs["created"]
	w.poison.dlq = w.deadLetters(t)
	lap("cold provision behind the poison messages")
	var ids []string
	require.NoError(t, json.Unmarshal([]byte(res.Outputs["instance-ids"]), &ids), res.Outputs)
	_, err = localenv.RunStep(ctx, w.releaseBin, w.stepEnv("4100", 0, nil), w.dir)
	require.NoError(t, err)
	lap("release")

	w.idle = map[string]int64{}
	items, err := e.Store.GetMany(ctx, ids)
	require.NoError(t, err)
	for _, id := range ids {
		require.Equal(t, state.Idle, items[id].State, "%s after release", id)
		w.idle[id] = items[id].Version
	}
	require.Len(t, w.idle, 2)
	w.warmAgentInstance(t)
	lap("agent cases' instance ready")
	return w
}

// stepEnv is the environment of a step binary for run (localenv.StepEnv) with its AWS, Lambda
// and GitHub traffic through the counting proxies, then set's variables; a variable set to
// unset is removed.
func (w *world) stepEnv(run string, count int, set map[string]string) []string {
	base := append(w.StepEnv(run, count, w.dir),
		"AWS_ENDPOINT_URL="+w.moto.URL(), "AWS_ENDPOINT_URL_DYNAMODB="+w.ddb.URL(), "AWS_ENDPOINT_URL_LAMBDA="+w.fn.URL(),
		"GITHUB_API_URL="+w.github.URL())
	// The test's own environment may come from a workflow run: the cases say what the step sees.
	drop := func(k string) bool {
		_, changed := set[k]
		return changed || k == "GITHUB_ACTIONS" || strings.HasPrefix(k, "INPUT_")
	}
	env := make([]string, 0, len(base)+len(set))
	for _, kv := range base {
		if k, _, _ := strings.Cut(kv, "="); !drop(k) {
			env = append(env, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if set[k] != unset {
			env = append(env, k+"="+set[k])
		}
	}
	return env
}

// runRelease runs the release step of run.
func (w *world) runRelease(run string) (localenv.StepResult, error) {
	return localenv.RunStep(w.ctx, w.releaseBin, w.stepEnv(run, 0, nil), w.dir)
}

// unset, as a value in stepEnv's set, removes the variable.
const unset = "\x00unset"

// exitCode returns a step's exit code (0 when it succeeded, -1 when it did not run).
func exitCode(err error) int {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	}
	return -1
}

// counts returns the AWS requests counted since the last call, by operation.
func (w *world) counts() map[string]int {
	out := w.moto.Take()
	for op, n := range w.ddb.Take() {
		out[op] += n
	}
	return out
}

// untouched checks that the pool's idle instances are still idle at the version they were left
// at: nothing wrote them.
func (w *world) untouched(t *testing.T) {
	t.Helper()
	items, err := w.Store.GetMany(w.ctx, slices.Collect(maps.Keys(w.idle)))
	require.NoError(t, err)
	for id, v := range w.idle {
		require.Contains(t, items, id)
		require.Equal(t, state.Idle, items[id].State, "%s", id)
		require.Equal(t, v, items[id].Version, "%s was written", id)
		require.Empty(t, items[id].RunID, "%s", id)
	}
}

// nothingLost is the end of the corpus: the idle instances are idle and untouched, each offered
// exactly once, and nothing runs that nothing would end.
func (w *world) nothingLost(t *testing.T) {
	t.Helper()
	w.untouched(t)
	offered, err := w.Offered(w.ctx)
	require.NoError(t, err)
	want := map[string]int{}
	for id := range w.idle {
		want[id] = 1
	}
	require.Equal(t, want, offered, "every idle instance offered exactly once, and nothing else")
	leaked, err := w.Leaked(w.ctx)
	require.NoError(t, err)
	require.Empty(t, leaked)
}

// githubCounter is a reverse proxy in front of the GitHub stand-in that counts the requests the
// steps make: refused input must ask GitHub for nothing either.
type githubCounter struct {
	srv *httptest.Server
	mu  sync.Mutex
	req []string // "METHOD path"
}

func newGitHubCounter(t *testing.T, target string) *githubCounter {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	c := &githubCounter{}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0) // a client that gave up is no news
	c.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.req = append(c.req, r.Method+" "+r.URL.Path)
		c.mu.Unlock()
		rp.ServeHTTP(rw, r)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// URL is the proxy's address: the steps' GITHUB_API_URL.
func (c *githubCounter) URL() string { return c.srv.URL }

// Take returns the requests since the last call.
func (c *githubCounter) Take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.req
	c.req = nil
	return out
}

// writes returns the requests of reqs that may change something (anything but GET).
func writes(reqs []string) []string {
	return slices.DeleteFunc(slices.Clone(reqs), func(r string) bool { return strings.HasPrefix(r, http.MethodGet+" ") })
}
