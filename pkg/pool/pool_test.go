package pool_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// The pool's tests run on the in-memory fakes (internal/testkit/fake): the real pool, selector,
// queue and launcher on a fake state store, EC2, SQS and SSM, with a fake agent answering for
// every instance as a live one would. The conditional writes they rest on are tested against
// DynamoDB Local in pkg/contract/state, and the fake store against the same table of them in
// internal/testkit/fake.

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// claimed returns n idle instances of w claimed by run, acknowledged by their agents.
func claimed(t *testing.T, w *fake.World, n int, run string) []state.Instance {
	t.Helper()
	var out []state.Instance
	for range n {
		in := w.AddIdle(t, fake.Idle{})
		c, err := w.Store.Transition(ctx(t), state.Change{InstanceID: in.ID, Pool: in.Pool, From: state.Idle, To: state.Claimed,
			Version: in.Version, Threshold: time.Now().Add(time.Hour), Assign: &state.Assignment{RunID: run, RunAttempt: 1, Repo: "octo/app"}})
		require.NoError(t, err)
		require.NoError(t, w.Store.AgentAck(c.ID, c.Version, time.Now()))
		out = append(out, *w.Store.Item(c.ID))
	}
	return out
}

func instanceIDs(insts []state.Instance) []string {
	out := make([]string, len(insts))
	for i, in := range insts {
		out[i] = in.ID
	}
	return out
}

// TestValidate: a pool missing what a door needs is refused before anything happens, naming
// each missing part.
func TestValidate(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	require.NoError(t, w.Pool.Validate("Queues", "Launcher", "Bells"))
	var none *pool.Pool
	require.ErrorContains(t, none.Validate(), "pool: not set")
	bare := &pool.Pool{Store: w.Store}
	require.ErrorContains(t, bare.Validate(), "pool: Pool.EC2 not set")
	require.NoError(t, (&pool.Pool{Store: w.Store, EC2: w.EC2}).Validate(), "release needs no launcher, queue or doorbells")
	require.EqualError(t, (&pool.Pool{Store: w.Store, EC2: w.EC2}).Validate("Queues", "Launcher", "Bells"),
		"pool: Pool.Queues, Pool.Launcher, Pool.Bells not set")
}
