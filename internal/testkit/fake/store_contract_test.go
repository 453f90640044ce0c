package fake_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// The contract: one table of transitions, run against the fake store and against state.Store on
// DynamoDB Local (that half skips under -short), with the same outcome asked of both.

const contractPool = "linux"

// backend is one store under the contract, with the agent's writes to an item.
type backend struct {
	store interface {
		Create(ctx context.Context, insts []*state.Instance) error
		Get(ctx context.Context, id string) (*state.Instance, error)
		Transition(ctx context.Context, c state.Change) (*state.Instance, error)
		MarkRetire(ctx context.Context, id, run, why string) (*state.Instance, bool, error)
	}
	ack    func(ctx context.Context, id string, version int64, at time.Time) error
	beat   func(ctx context.Context, id string, at time.Time) error
	signal func(ctx context.Context, id string, sig state.Signal) error
}

func fakeBackend() backend {
	s := fake.NewStore(fake.Account)
	return backend{store: s,
		ack: func(_ context.Context, id string, v int64, at time.Time) error { return s.AgentAck(id, v, at) },
		beat: func(_ context.Context, id string, at time.Time) error {
			_, err := s.AgentHeartbeat(id, at)
			return err
		},
		signal: func(_ context.Context, id string, sig state.Signal) error { return s.AgentSignal(id, sig) }}
}

func dynamoBackend(t *testing.T) backend {
	testbed.Require(t)
	db := testbed.DynamoDB(t)
	table := testbed.Name(t, "hangar-contract")
	require.NoError(t, testbed.CreateTable(testbed.Context(t, time.Minute), db, table))
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	s, err := state.NewStore(db, table, fake.Account)
	require.NoError(t, err)
	agent := func(id string) *state.Agent {
		a, err := state.NewAgent(db, table, fake.Account.ARN(id), "")
		require.NoError(t, err)
		return a
	}
	return backend{store: s,
		ack: func(ctx context.Context, id string, v int64, at time.Time) error { return agent(id).Ack(ctx, v, at) },
		beat: func(ctx context.Context, id string, at time.Time) error {
			_, err := agent(id).Heartbeat(ctx, at)
			return err
		},
		signal: func(ctx context.Context, id string, sig state.Signal) error { return agent(id).Signal(ctx, sig) }}
}

// step moves the item of id on from cur (nil before the first) and returns it as it is after.
type step func(ctx context.Context, b backend, id string, cur *state.Instance) (*state.Instance, error)

func later() time.Time { return time.Now().Add(10 * time.Minute) }

func create(run string) step {
	return func(ctx context.Context, b backend, id string, _ *state.Instance) (*state.Instance, error) {
		in := &state.Instance{ID: id, Pool: contractPool, Threshold: later(),
			Spec: state.Spec{InstanceType: "c7i.large", UsageClass: state.UsageSpot, AZ: "us-east-1a", VCPU: 2, MemoryMiB: 4096}}
		if run != "" {
			in.RunID, in.Repo = run, "octo/app"
		}
		if err := b.store.Create(ctx, []*state.Instance{in}); err != nil {
			return nil, err
		}
		return b.store.Get(ctx, id)
	}
}

// move transitions cur to st with the change's usual fields (cur's state, version, pool and
// run); mod changes the change.
func move(st state.State, mod func(c *state.Change)) step {
	return func(ctx context.Context, b backend, id string, cur *state.Instance) (*state.Instance, error) {
		c := state.Change{InstanceID: id, Pool: cur.Pool, From: cur.State, To: st, Version: cur.Version, RunID: cur.RunID,
			Threshold: later(), Reason: "contract"}
		if st == state.Claimed {
			c.RunID = ""
			c.Assign = &state.Assignment{RunID: "500", RunAttempt: 1, Repo: "octo/app", ClaimID: "c1"}
		}
		if mod != nil {
			mod(&c)
		}
		return b.store.Transition(ctx, c)
	}
}

func claimBy(repo, run string, reuse state.Reuse) step {
	return move(state.Claimed, func(c *state.Change) {
		c.Assign.Repo, c.Assign.RunID, c.Reuse = repo, run, reuse
	})
}

func ack() step {
	return func(ctx context.Context, b backend, id string, cur *state.Instance) (*state.Instance, error) {
		if err := b.ack(ctx, id, cur.Version, time.Now()); err != nil {
			return nil, err
		}
		return b.store.Get(ctx, id)
	}
}

// signal writes the agent's signal about run for the item's version.
func signal(name state.SignalName, run string) step {
	return func(ctx context.Context, b backend, id string, cur *state.Instance) (*state.Instance, error) {
		if err := b.signal(ctx, id, state.Signal{Name: name, Run: run, Version: cur.Version, At: time.Now()}); err != nil {
			return nil, err
		}
		return b.store.Get(ctx, id)
	}
}

// mark marks the instance to retire for run (a drain while it serves run); a mark refused (the
// instance serves no such run) is a conflict as the item is.
func mark(run string) step {
	return func(ctx context.Context, b backend, id string, _ *state.Instance) (*state.Instance, error) {
		in, ok, err := b.store.MarkRetire(ctx, id, run, "its pool is drained")
		if err == nil && !ok {
			err = &state.ConflictError{InstanceID: id, RunID: run, Current: in}
		}
		return in, err
	}
}

// whenRegistered is a move to running conditional on the agent's REGISTERED (Change.Registered).
func whenRegistered(c *state.Change) { c.Registered = true }

func beat(ago time.Duration) step {
	return func(ctx context.Context, b backend, id string, _ *state.Instance) (*state.Instance, error) {
		if err := b.beat(ctx, id, time.Now().Add(-ago)); err != nil {
			return nil, err
		}
		return b.store.Get(ctx, id)
	}
}

// outcome is what the contract compares of a step's result.
type outcome struct {
	Err              string // "", "conflict" or "invalid"
	State            state.State
	Version          int64
	RunID, LastRunID string
	RegisterFailures int
	Served           []string
	NoItem           bool // a conflict on an instance without an item
}

func outcomeOf(in *state.Instance, err error) outcome {
	var conflict *state.ConflictError
	switch {
	case errors.As(err, &conflict):
		if conflict.Current == nil {
			return outcome{Err: "conflict", NoItem: true}
		}
		return outcome{Err: "conflict", State: conflict.Current.State, Version: conflict.Current.Version, RunID: conflict.Current.RunID}
	case err != nil:
		return outcome{Err: "invalid"}
	}
	return outcome{State: in.State, Version: in.Version, RunID: in.RunID, LastRunID: in.LastRunID,
		RegisterFailures: in.RegisterFailures, Served: in.ServedRepos}
}

var served = []step{create(""), move(state.Idle, nil), claimBy("octo/app", "500", ""), ack(), move(state.Running, nil),
	move(state.Idle, nil)} // idle at version 5, having served octo/app for run 500

var contract = []struct {
	name  string
	steps []step // every step but the last must succeed; the last is the one compared
	want  outcome
}{
	{"created for a run → running", []step{create("500"), move(state.Running, nil)},
		outcome{State: state.Running, Version: 2, RunID: "500", Served: []string{"octo/app"}}},
	{"created → running for another run", []step{create("500"), move(state.Running, func(c *state.Change) { c.RunID = "501" })},
		outcome{Err: "conflict", State: state.Created, Version: 1, RunID: "500"}},
	{"warm created → idle", []step{create(""), move(state.Idle, nil)}, outcome{State: state.Idle, Version: 2}},
	{"created for a run → idle (a run holds it)", []step{create("500"), move(state.Idle, func(c *state.Change) { c.RunID = "" })},
		outcome{Err: "conflict", State: state.Created, Version: 1, RunID: "500"}},
	{"claim of a fresh idle instance", []step{create(""), move(state.Idle, nil), claimBy("octo/app", "500", "")},
		outcome{State: state.Claimed, Version: 3, RunID: "500", Served: []string{"octo/app"}}},
	{"claim at a stale version", []step{create(""), move(state.Idle, nil), move(state.Claimed, func(c *state.Change) { c.Version-- })},
		outcome{Err: "conflict", State: state.Idle, Version: 2}},
	{"claim in another pool", []step{create(""), move(state.Idle, nil), move(state.Claimed, func(c *state.Change) { c.Pool = "other" })},
		outcome{Err: "conflict", State: state.Idle, Version: 2}},
	{"release after serving", served, outcome{State: state.Idle, Version: 5, LastRunID: "500", Served: []string{"octo/app"}}},
	{"reuse repository: another repository", append(served[:len(served):len(served)], claimBy("octo/other", "600", state.ReuseRepository)),
		outcome{Err: "conflict", State: state.Idle, Version: 5}},
	{"reuse repository: the same repository", append(served[:len(served):len(served)], claimBy("octo/app", "600", state.ReuseRepository)),
		outcome{State: state.Claimed, Version: 6, RunID: "600", LastRunID: "500", Served: []string{"octo/app"}}},
	{"reuse owner: the same owner", append(served[:len(served):len(served)], claimBy("octo/other", "600", state.ReuseOwner)),
		outcome{State: state.Claimed, Version: 6, RunID: "600", LastRunID: "500", Served: []string{"octo/app", "octo/other"}}},
	{"reuse owner: another owner", append(served[:len(served):len(served)], claimBy("someone/app", "600", state.ReuseOwner)),
		outcome{Err: "conflict", State: state.Idle, Version: 5}},
	{"reuse never: served before", append(served[:len(served):len(served)], claimBy("octo/app", "600", state.ReuseNever)),
		outcome{Err: "conflict", State: state.Idle, Version: 5}},
	{"reuse any: another owner", append(served[:len(served):len(served)], claimBy("someone/app", "600", state.ReuseAny)),
		outcome{State: state.Claimed, Version: 6, RunID: "600", LastRunID: "500", Served: []string{"octo/app", "someone/app"}}},
	{"claim of a quiet agent's instance", []step{create(""), move(state.Idle, nil), beat(5 * time.Minute),
		move(state.Claimed, func(c *state.Change) { c.AliveSince = time.Now().Add(-state.HeartbeatFresh) })},
		outcome{Err: "conflict", State: state.Idle, Version: 2}},
	{"claim of a live agent's instance", []step{create(""), move(state.Idle, nil), beat(time.Second),
		move(state.Claimed, func(c *state.Change) { c.AliveSince = time.Now().Add(-state.HeartbeatFresh) })},
		outcome{State: state.Claimed, Version: 3, RunID: "500", Served: []string{"octo/app"}}},
	{"claim with no heartbeat at all", []step{create(""), move(state.Idle, nil),
		move(state.Claimed, func(c *state.Change) { c.AliveSince = time.Now().Add(-state.HeartbeatFresh) })},
		outcome{Err: "conflict", State: state.Idle, Version: 2}},
	{"marked while serving; given back by one who saw the mark", []step{create(""), move(state.Idle, nil), claimBy("octo/app", "500", ""), ack(),
		mark("500"), move(state.Idle, func(c *state.Change) { c.Marked = true })},
		outcome{State: state.Idle, Version: 4, LastRunID: "500", Served: []string{"octo/app"}}},
	{"marked while serving; given back by one who did not see the mark", []step{create(""), move(state.Idle, nil), claimBy("octo/app", "500", ""), ack(),
		mark("500"), move(state.Idle, nil)},
		outcome{Err: "conflict", State: state.Claimed, Version: 3, RunID: "500"}},
	{"mark for a run the instance does not serve", []step{create(""), move(state.Idle, nil), claimBy("octo/app", "500", ""), mark("501")},
		outcome{Err: "conflict", State: state.Claimed, Version: 3, RunID: "500"}},
	{"unacknowledged claim given back", []step{create(""), move(state.Idle, nil), claimBy("octo/app", "500", ""),
		move(state.Idle, func(c *state.Change) { c.Unacknowledged = true })},
		outcome{State: state.Idle, Version: 4, Served: []string{"octo/app"}}},
	{"acknowledged claim given back unacknowledged", []step{create(""), move(state.Idle, nil), claimBy("octo/app", "500", ""), ack(),
		move(state.Idle, func(c *state.Change) { c.Unacknowledged = true })},
		outcome{Err: "conflict", State: state.Claimed, Version: 3, RunID: "500"}},
	{"failed registration counted", []step{create(""), move(state.Idle, nil), claimBy("octo/app", "500", ""), ack(),
		move(state.Idle, func(c *state.Change) { c.RegisterFailed = true })},
		outcome{State: state.Idle, Version: 4, LastRunID: "500", RegisterFailures: 1, Served: []string{"octo/app"}}},
	{"registered after a failure resets the count", []step{create(""), move(state.Idle, nil), claimBy("octo/app", "500", ""),
		move(state.Idle, func(c *state.Change) { c.RegisterFailed = true }), claimBy("octo/app", "501", ""), move(state.Running, nil)},
		outcome{State: state.Running, Version: 6, RunID: "501", LastRunID: "500", Served: []string{"octo/app"}}},
	{"running once registered", []step{create(""), move(state.Idle, nil), claimBy("octo/app", "500", ""), ack(),
		signal(state.SignalRegistered, "500"), move(state.Running, whenRegistered)},
		outcome{State: state.Running, Version: 4, RunID: "500", Served: []string{"octo/app"}}},
	{"running before registered", []step{create(""), move(state.Idle, nil), claimBy("octo/app", "500", ""), ack(),
		move(state.Running, whenRegistered)},
		outcome{Err: "conflict", State: state.Claimed, Version: 3, RunID: "500"}},
	{"running after a failed registration", []step{create(""), move(state.Idle, nil), claimBy("octo/app", "500", ""), ack(),
		signal(state.SignalRegisterFailed, "500"), move(state.Running, whenRegistered)},
		outcome{Err: "conflict", State: state.Claimed, Version: 3, RunID: "500"}},
	{"running on a registration of an earlier version", []step{create(""), move(state.Idle, nil), signal(state.SignalRegistered, "500"),
		claimBy("octo/app", "500", ""), ack(), move(state.Running, whenRegistered)},
		outcome{Err: "conflict", State: state.Claimed, Version: 3, RunID: "500"}},
	{"release by another run", []step{create("500"), move(state.Running, nil), move(state.Idle, func(c *state.Change) { c.RunID = "501" })},
		outcome{Err: "conflict", State: state.Running, Version: 2, RunID: "500"}},
	{"terminate an idle instance", []step{create(""), move(state.Idle, nil), move(state.Terminated, nil)},
		outcome{State: state.Terminated, Version: 3}},
	{"terminate a running instance keeps its run as the last", []step{create("500"), move(state.Running, nil), move(state.Terminated, nil)},
		outcome{State: state.Terminated, Version: 3, LastRunID: "500", Served: []string{"octo/app"}}},
	{"terminate a terminated instance", []step{create(""), move(state.Terminated, nil), move(state.Terminated, func(c *state.Change) { c.From = state.Idle })},
		outcome{Err: "conflict", State: state.Terminated, Version: 2}},
	{"an instance without an item", []step{func(context.Context, backend, string, *state.Instance) (*state.Instance, error) {
		return &state.Instance{Pool: contractPool, State: state.Idle, Version: 1}, nil
	}, move(state.Claimed, nil)}, outcome{Err: "conflict", NoItem: true}},
	{"illegal transition", []step{create(""), move(state.Idle, nil), move(state.Running, nil)}, outcome{Err: "invalid"}},
}

var contractSeq atomic.Uint64

func runContract(t *testing.T, newBackend func(t *testing.T) backend) {
	b := newBackend(t)
	for _, tc := range contract {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testbed.Context(t, 30*time.Second)
			id := fmt.Sprintf("i-%017x", uint64(time.Now().UnixNano())&0xffffffffff00+contractSeq.Add(1)&0xff)
			var (
				cur *state.Instance
				err error
			)
			for i, s := range tc.steps {
				cur, err = s(ctx, b, id, cur)
				if i < len(tc.steps)-1 {
					require.NoError(t, err, "step %d", i+1)
				}
			}
			require.Equal(t, tc.want, outcomeOf(cur, err))
		})
	}
}

func TestStoreContractFake(t *testing.T) {
	runContract(t, func(*testing.T) backend { return fakeBackend() })
}

func TestStoreContractDynamoDB(t *testing.T) {
	runContract(t, dynamoBackend)
}
