package state_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

func ids(insts []state.Instance) []string {
	out := make([]string, len(insts))
	for i, in := range insts {
		out[i] = in.ID
	}
	return out
}

// TestByRun finds a run's live instances through the index, and not other runs' or released ones.
func TestByRun(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := testbed.Context(t, time.Minute)
	a := reach(t, s, state.Running, "900")
	b := reach(t, s, state.Claimed, "900")
	c := create(t, s, "900")
	_ = reach(t, s, state.Running, "901")
	released := move(t, s, reach(t, s, state.Running, "900"), state.Idle, "")
	_ = move(t, s, reach(t, s, state.Running, "900"), state.Terminated, "")

	got, err := s.ByRun(ctx, "900")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{a.ID, b.ID, c.ID}, ids(got))
	require.NotContains(t, ids(got), released.ID)

	_, err = s.ByRun(ctx, "")
	require.ErrorContains(t, err, "run id is empty")
}

// TestQueriesPagePastOneThousand: 1,200 idle instances of one pool come back whole, over many
// pages, and GetMany reads them in batches of 100.
func TestQueriesPagePastOneThousand(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := testbed.Context(t, 2*time.Minute)
	const n = 1200
	insts := make([]*state.Instance, n)
	for i := range insts {
		insts[i] = &state.Instance{ID: newID(), Pool: "paging", Threshold: later(time.Hour), Assignment: state.Assignment{RunID: "31337", Repo: "octo/app"}}
	}
	require.NoError(t, s.Create(ctx, insts))

	s.PageLimit = 100
	before := db.calls.Load()
	got, err := s.InPoolState(ctx, "paging", state.Created)
	require.NoError(t, err)
	require.Len(t, got, n)
	require.GreaterOrEqual(t, db.calls.Load()-before, int64(n/100), "followed every page")
	seen := map[string]bool{}
	for _, in := range got {
		require.False(t, seen[in.ID], "duplicate %s", in.ID)
		seen[in.ID] = true
	}
	for i := 1; i < len(got); i++ {
		require.False(t, got[i].Threshold.Before(got[i-1].Threshold), "oldest deadline first")
	}

	byRun, err := s.ByRun(ctx, "31337")
	require.NoError(t, err)
	require.Len(t, byRun, n)

	want := make([]string, n)
	for i, in := range insts {
		want[i] = in.ID
	}
	before = db.calls.Load()
	many, err := s.GetMany(ctx, want)
	require.NoError(t, err)
	require.Len(t, many, n)
	require.Equal(t, int64(n/100), db.calls.Load()-before, "one BatchGetItem per 100 keys")
}

// TestExpiredReturnsExactlyTheExpired: per pool and state, only past-deadline items are returned,
// and only they are read.
func TestExpiredReturnsExactlyTheExpired(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := testbed.Context(t, time.Minute)
	now := time.Now()
	var want []string
	for i := range 40 {
		d := time.Duration(i-10) * time.Minute // 10 in the past, 30 in the future
		pool := testPool
		if i%5 == 0 {
			pool = "other-pool" // same deadlines in another pool: never returned
		}
		in := &state.Instance{ID: newID(), Pool: pool, Threshold: now.Add(d)}
		require.NoError(t, s.Create(ctx, []*state.Instance{in}))
		if d < 0 && pool == testPool {
			want = append(want, in.ID)
		}
	}
	before := db.items.Load()
	got, err := s.Expired(ctx, testPool, state.Created, now)
	require.NoError(t, err)
	require.ElementsMatch(t, want, ids(got))
	require.Equal(t, int64(len(want)), db.items.Load()-before, "only expired items are read")

	// Another state of the same pool has none.
	got, err = s.Expired(ctx, testPool, state.Idle, now)
	require.NoError(t, err)
	require.Empty(t, got)

	// After one moves on, it is no longer expired in created.
	first, err := s.Get(ctx, want[0])
	require.NoError(t, err)
	move(t, s, first, state.Terminated, "")
	got, err = s.Expired(ctx, testPool, state.Created, now)
	require.NoError(t, err)
	require.Len(t, got, len(want)-1)
	require.NotContains(t, ids(got), want[0])
}

// TestInputValidation: malformed ids, runs, pools and states are refused with a message naming the
// value, before any request.
func TestInputValidation(t *testing.T) {
	t.Parallel()
	s, err := state.NewStore(nil, "t", account) // nil client: any request would panic
	require.NoError(t, err)
	ctx := testbed.Context(t, 10*time.Second)
	ok := state.Change{InstanceID: "i-0123456789abcdef0", Pool: testPool, From: state.Idle, To: state.Claimed,
		Version: 3, Assign: assign("12"), Threshold: later(time.Minute)}
	require.NoError(t, ok.Validate())

	tests := []struct {
		name   string
		mutate func(*state.Change)
		want   string
	}{
		{"malformed id", func(c *state.Change) { c.InstanceID = "i-XYZ" }, `instance id "i-XYZ" is malformed`},
		{"empty id", func(c *state.Change) { c.InstanceID = "" }, `instance id "" is malformed`},
		{"unknown state", func(c *state.Change) { c.To = "sleeping" }, `unknown to-state "sleeping"`},
		{"unknown from", func(c *state.Change) { c.From = "" }, `unknown from-state ""`},
		{"bad pool", func(c *state.Change) { c.Pool = "Linux_X64" }, `pool name "Linux_X64" is malformed`},
		{"zero version", func(c *state.Change) { c.Version = 0 }, "version 0"},
		{"negative version", func(c *state.Change) { c.Version = -2 }, "version -2"},
		{"no threshold", func(c *state.Change) { c.Threshold = time.Time{} }, "threshold is not set"},
		{"claim without run", func(c *state.Change) { c.Assign = nil }, "no assignment"},
		{"claim for bad run", func(c *state.Change) { c.Assign = assign("12a") }, `run id "12a" is malformed`},
		{"claim for empty run", func(c *state.Change) { c.Assign = assign("") }, "run id is empty"},
		{"release with bad run", func(c *state.Change) { c.From, c.To, c.Assign, c.RunID = state.Running, state.Idle, nil, "0" }, `run id "0" is malformed`},
		{"assignment outside a claim", func(c *state.Change) { c.From, c.To = state.Idle, state.Stopped }, "only given with a claim"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := ok
			tc.mutate(&c)
			_, err := s.Transition(ctx, c)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}

	_, err = s.Get(ctx, "instance-1")
	require.ErrorContains(t, err, `instance id "instance-1" is malformed`)
	_, err = s.InPoolState(ctx, testPool, state.Terminated)
	require.ErrorContains(t, err, "want a live state")
	_, err = s.Expired(ctx, "bad#pool", state.Idle, time.Now())
	require.ErrorContains(t, err, `pool name "bad#pool" is malformed`)
	_, err = state.ParseState("gone")
	require.ErrorContains(t, err, `unknown state "gone"`)
	err = s.Create(ctx, []*state.Instance{{ID: "i-0123456789abcdef0", Pool: testPool, State: state.Idle, Threshold: later(time.Minute)}})
	require.ErrorContains(t, err, "new items start in created")
	err = s.Create(ctx, []*state.Instance{{ID: "i-0123456789abcdef0", Pool: testPool}})
	require.ErrorContains(t, err, "threshold is not set")
	err = s.Create(ctx, []*state.Instance{{ID: "i-0123456789abcdef0", Pool: testPool, Threshold: later(time.Minute),
		Report: state.Report{Signal: state.SignalReady}}})
	require.ErrorContains(t, err, "agent attributes")

	_, err = state.NewStore(nil, "t", state.Account{Partition: "aws", Region: "us-east-1", ID: "12"})
	require.ErrorContains(t, err, `account "12" is malformed`)
	_, err = state.InstanceIDFromARN("arn:aws:ec2:us-east-1:1:volume/v-1")
	require.ErrorContains(t, err, "is malformed")
	id, err := state.InstanceIDFromARN(account.ARN("i-0123456789abcdef0"))
	require.NoError(t, err)
	require.Equal(t, "i-0123456789abcdef0", id)
}

// TestShardsSpreadInstances: no single index partition holds all of a pool-state.
func TestShardsSpreadInstances(t *testing.T) {
	t.Parallel()
	counts := make([]int, state.Shards)
	for i := range 1000 {
		counts[state.Shard(fmt.Sprintf("i-%017x", i*7919))]++
	}
	for sh, c := range counts {
		require.Greater(t, c, 150, "shard %d holds %d of 1000", sh, c)
	}
	require.True(t, strings.HasPrefix(state.PoolStateShard("p", state.Idle, "i-0123456789abcdef0"), "p#idle#"))
}

// TestCreateRefusesExisting: an item is never overwritten by a create, and a batch with one
// existing item writes none.
func TestCreateRefusesExisting(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := testbed.Context(t, time.Minute)
	old := reach(t, s, state.Idle, "")
	fresh := &state.Instance{ID: newID(), Pool: testPool, Threshold: later(time.Minute)}
	dup := &state.Instance{ID: old.ID, Pool: testPool, Threshold: later(time.Minute)}
	require.Error(t, s.Create(ctx, []*state.Instance{fresh, dup}))
	_, err := s.Get(ctx, fresh.ID)
	require.ErrorIs(t, err, state.ErrNotFound, "the transaction wrote nothing")
	got, err := s.Get(ctx, old.ID)
	require.NoError(t, err)
	require.Equal(t, old, got)
}
