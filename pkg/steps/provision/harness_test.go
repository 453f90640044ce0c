package provision_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/internal/wire/step"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
	"github.com/hangar-ci/hangar/pkg/steps/release"
)

// The end-to-end tests (e2e_test.go, tokens_test.go) run against the local emulators with real
// agent processes (internal/testkit/localenv); go test -short skips them. Every other test runs
// provision on the in-memory fakes (orchestration_test.go).

// env is one end-to-end test's world plus the wiring provision and release run with.
type env struct {
	*localenv.Env
	t   *testing.T
	ctx context.Context
	// ec2 records the fleets asked for.
	ec2 *fake.RecordedEC2
	w   *step.Wiring
}

func newEnv(t *testing.T, o localenv.Options) *env {
	t.Helper()
	testbed.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	o.Stack = testbed.Name(t, "prov")
	o.Baked = true
	o.AgentArgs = append([]string{"--poll-interval", "250ms"}, o.AgentArgs...)
	le, err := localenv.Start(ctx, o)
	require.NoError(t, err)
	e := &env{Env: le, t: t, ctx: ctx, ec2: fake.Record(le.EC2)}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e.w, err = le.Wiring(e.ec2, log)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, id := range e.Sim.Running() {
				t.Logf("agent log of %s:\n%s", id, e.Sim.AgentLog(id))
			}
		}
		le.Close()
	})
	return e
}

// config is a provision request for run.
func (e *env) config(run string, n int) provision.Config {
	return provision.Config{Stack: e.Stack, Pool: e.Pool, Count: n, RunID: run, RunAttempt: 1, Repository: localenv.Repo,
		ServerURL: e.GH.URL(), RegistrationTimeout: time.Minute}
}

func (e *env) mustProvision(run string, n int) *provision.Result {
	e.t.Helper()
	deps, err := e.w.Provision(e.ctx, e.Pool)
	require.NoError(e.t, err)
	res, err := provision.Run(e.ctx, e.config(run, n), deps)
	require.NoError(e.t, err)
	require.Len(e.t, res.Instances, n)
	return res
}

func (e *env) release(run string) *release.Result {
	e.t.Helper()
	releaser, warnings, err := e.w.Release(e.ctx, release.Config{DeregisterTimeout: 30 * time.Second})
	require.NoError(e.t, err)
	require.Empty(e.t, warnings)
	res, err := releaser.Release(e.ctx, run)
	require.NoError(e.t, err)
	return res
}

func ids(res *provision.Result) []string { return resultIDs(res) }

// items reads the items of ids.
func (e *env) items(ids []string) map[string]*state.Instance {
	e.t.Helper()
	out, err := e.Store.GetMany(e.ctx, ids)
	require.NoError(e.t, err)
	return out
}

// offered counts the pool's visible offers by instance (once, at the end of a test).
func (e *env) offered() map[string]int {
	e.t.Helper()
	out, err := e.Offered(e.ctx)
	require.NoError(e.t, err)
	return out
}
