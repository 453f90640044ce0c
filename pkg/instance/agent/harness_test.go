package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

const repo = localenv.Repo

// env wraps a local world for one test: every step fails the test instead of returning an error.
type env struct {
	*localenv.Env
	t   *testing.T
	ctx context.Context
}

type envOptions = localenv.Options

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	testbed.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	o.Stack = testbed.Name(t, "agent")
	o.AgentArgs = append([]string{"--poll-interval", "250ms", "--spot-interval", "250ms"}, o.AgentArgs...)
	le, err := localenv.Start(ctx, o)
	require.NoError(t, err)
	e := &env{Env: le, t: t, ctx: ctx}
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

func (e *env) must(in *state.Instance, err error) *state.Instance {
	e.t.Helper()
	require.NoError(e.t, err)
	return in
}

func (e *env) launch(deadline time.Time) string {
	e.t.Helper()
	id, err := e.Launch(e.ctx, deadline)
	require.NoError(e.t, err)
	return id
}

func (e *env) waitSignal(id string, name state.SignalName, run string, minVersion int64) *state.Instance {
	e.t.Helper()
	return e.must(e.WaitSignal(e.ctx, id, name, run, minVersion))
}

func (e *env) transition(c state.Change) *state.Instance {
	e.t.Helper()
	return e.must(e.Transition(e.ctx, c))
}

func (e *env) warm(id string) *state.Instance {
	e.t.Helper()
	return e.must(e.Warm(e.ctx, id))
}

func (e *env) claim(in *state.Instance, run string) *state.Instance {
	e.t.Helper()
	return e.must(e.Claim(e.ctx, in, run))
}

func (e *env) release(in *state.Instance) *state.Instance {
	e.t.Helper()
	return e.must(e.Release(e.ctx, in))
}
