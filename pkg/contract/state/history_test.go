package state_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestRunRecords: the transition that ends a run writes its record in the same request, a give
// back to idle and a retirement alike; a lost condition writes neither the change nor the
// record; records and ended instances are found by pool and end time, and outlive the run.
func TestRunRecords(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := testbed.Context(t, time.Minute)
	start := time.Now().Add(-time.Second)
	deadline := time.Now().Add(time.Hour)
	spec := state.Spec{InstanceType: "c7i.large", UsageClass: state.UsageSpot, AZ: "us-east-1a", Price: 0.0357, PriceSource: state.PriceSpot}

	// Three instances claimed for run 900 and moved to running.
	var running []state.Instance
	for range 3 {
		in := &state.Instance{ID: newID(), Pool: testPool, Threshold: deadline, Spec: spec}
		require.NoError(t, s.Create(ctx, []*state.Instance{in}))
		idle, err := s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: testPool, From: state.Created, To: state.Idle, Version: 1, Threshold: deadline})
		require.NoError(t, err)
		claimed, err := s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: testPool, From: state.Idle, To: state.Claimed, Version: idle.Version,
			Threshold: deadline, Reuse: state.ReuseAny, Assign: &state.Assignment{RunID: "900", RunAttempt: 2, Repo: "octo/app"}})
		require.NoError(t, err)
		require.True(t, claimed.Claimed)
		require.False(t, claimed.AssignedAt.IsZero(), "the claim records when the run got the instance")
		run, err := s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: testPool, From: state.Claimed, To: state.Running, Version: claimed.Version,
			RunID: "900", Threshold: deadline})
		require.NoError(t, err)
		require.False(t, run.RegisteredAt.IsZero())
		running = append(running, *run)
	}
	// One was taken back meanwhile by someone else: its give-back loses.
	_, err := s.Transition(ctx, state.Change{InstanceID: running[2].ID, Pool: testPool, From: state.Running, To: state.Idle,
		Version: running[2].Version, RunID: "900", Threshold: deadline, Reason: "refresh"})
	require.NoError(t, err)

	before := db.calls.Load()
	back := func(in state.Instance) state.Change {
		return state.Change{InstanceID: in.ID, Pool: testPool, From: state.Running, To: state.Idle, Version: in.Version, RunID: "900",
			Threshold: deadline, Reason: "released by run 900"}
	}
	out := s.TransitionAll(ctx, []state.Change{back(running[0]), back(running[2])}, running[0:3:3][0:1:1])
	require.Error(t, out[0].Err, "befores must match the changes")
	out = s.TransitionAll(ctx, []state.Change{back(running[0]), back(running[2])}, []state.Instance{running[0], running[2]})
	require.NoError(t, out[0].Err)
	require.ErrorIs(t, out[1].Err, state.ErrConflict)
	require.Equal(t, int64(2), db.calls.Load()-before, "one cancelled transaction, then the winner alone (update and record together)")

	// The third is retired while it holds the run (a batch of one: update and record together).
	before = db.calls.Load()
	out = s.TransitionAll(ctx, []state.Change{{InstanceID: running[1].ID, Pool: testPool, From: state.Running, To: state.Terminated,
		Version: running[1].Version, RunID: "900", Reason: "its agent reported FAILED"}}, []state.Instance{running[1]})
	require.NoError(t, out[0].Err)
	require.Equal(t, int64(1), db.calls.Load()-before)

	recs, err := s.RunRecords(ctx, testPool, start, time.Now().Add(time.Second))
	require.NoError(t, err)
	require.Len(t, recs, 2, "a record for the give-back and one for the retirement; none for the lost write")
	byID := map[string]state.RunRecord{}
	for _, r := range recs {
		byID[r.InstanceID] = r
	}
	r := byID[running[0].ID]
	require.Equal(t, "900", r.Run)
	require.Equal(t, 2, r.RunAttempt)
	require.Equal(t, "octo/app", r.Repo)
	require.True(t, r.Claimed)
	require.Equal(t, "idle", r.Outcome)
	require.Equal(t, "released by run 900", r.Reason)
	require.Equal(t, running[0].AssignedAt, r.AssignedAt)
	require.Equal(t, running[0].RegisteredAt, r.RegisteredAt)
	require.False(t, r.EndedAt.Before(r.AssignedAt))
	cost, ok := r.Cost()
	require.True(t, ok)
	require.InDelta(t, r.EndedAt.Sub(r.AssignedAt).Seconds()*0.0357/3600, cost, 1e-12)
	require.Equal(t, "terminated", byID[running[1].ID].Outcome)
	require.Equal(t, "its agent reported FAILED", byID[running[1].ID].Reason)

	none, err := s.RunRecords(ctx, testPool, start.Add(-time.Hour), start)
	require.NoError(t, err)
	require.Empty(t, none, "outside the window")

	ended, err := s.Ended(ctx, testPool, start, time.Now().Add(time.Second))
	require.NoError(t, err)
	require.Len(t, ended, 1)
	require.Equal(t, running[1].ID, ended[0].ID)
	require.Equal(t, "900", ended[0].LastRunID)
	require.InDelta(t, time.Now().Add(state.DefaultHistoryRetention).Unix(), ended[0].ExpiresAt, 60)

	// The run's instances are no longer the run's: the byRun index finds no record.
	insts, err := s.ByRun(ctx, "900")
	require.NoError(t, err)
	require.Empty(t, insts)
}

// TestHistoryRetention: a store told to keep its history 7 days (the stack's history.days)
// stamps the items it ends and the run records it writes to go in 7 days, by either write path.
func TestHistoryRetention(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	s.HistoryRetention = 7 * 24 * time.Hour
	ctx := testbed.Context(t, time.Minute)
	start := time.Now().Add(-time.Second)
	deadline := time.Now().Add(time.Hour)
	idle := func() *state.Instance {
		in := &state.Instance{ID: newID(), Pool: testPool, Threshold: deadline}
		require.NoError(t, s.Create(ctx, []*state.Instance{in}))
		got, err := s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: testPool, From: state.Created, To: state.Idle, Version: 1, Threshold: deadline})
		require.NoError(t, err)
		return got
	}
	in := idle()
	claimed, err := s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: testPool, From: state.Idle, To: state.Claimed, Version: in.Version,
		Threshold: deadline, Reuse: state.ReuseAny, Assign: &state.Assignment{RunID: "901", RunAttempt: 1, Repo: "octo/app"}})
	require.NoError(t, err)
	out := s.TransitionAll(ctx, []state.Change{{InstanceID: in.ID, Pool: testPool, From: state.Claimed, To: state.Terminated,
		Version: claimed.Version, RunID: "901", Reason: "its agent reported FAILED"}}, []state.Instance{*claimed})
	require.NoError(t, out[0].Err)
	week := time.Now().Add(7 * 24 * time.Hour).Unix()
	require.InDelta(t, week, out[0].Item.ExpiresAt, 60, "as the transaction reports it")

	single := idle()
	got, err := s.Transition(ctx, state.Change{InstanceID: single.ID, Pool: testPool, From: state.Idle, To: state.Terminated, Version: single.Version, Reason: "expired"})
	require.NoError(t, err)
	require.InDelta(t, week, got.ExpiresAt, 60)

	ended, err := s.Ended(ctx, testPool, start, time.Now().Add(time.Second))
	require.NoError(t, err)
	n := 0
	for _, e := range ended {
		if e.ID == in.ID || e.ID == single.ID {
			n++
			require.InDelta(t, week, e.ExpiresAt, 60, "as stored: %s", e.ID)
		}
	}
	require.Equal(t, 2, n)
	recs, err := s.RunRecords(ctx, testPool, start, time.Now().Add(time.Second))
	require.NoError(t, err)
	var rec *state.RunRecord
	for i := range recs {
		if recs[i].InstanceID == in.ID {
			rec = &recs[i]
		}
	}
	require.NotNil(t, rec, "the run's record")
	require.InDelta(t, week, rec.ExpiresAt, 60)
}

// TestHolding: the instances holding runs, read with only what says the hold: created for a
// run, claimed and running are found, a warm instance on its way and an idle one are not.
func TestHolding(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := testbed.Context(t, time.Minute)
	deadline := time.Now().Add(time.Hour)
	spec := state.Spec{InstanceType: "c7i.large", UsageClass: state.UsageSpot, AZ: "us-east-1a", Price: 0.0357, PriceSource: state.PriceSpot}
	create := func(run string) *state.Instance {
		in := &state.Instance{ID: newID(), Pool: testPool, Threshold: deadline, Spec: spec}
		if run != "" {
			in.Assignment = state.Assignment{RunID: run, RunAttempt: 1, Repo: "octo/app"}
		}
		require.NoError(t, s.Create(ctx, []*state.Instance{in}))
		return in
	}
	booting := create("910")
	create("") // warm, no run
	idle := func() *state.Instance {
		in := create("")
		got, err := s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: testPool, From: state.Created, To: state.Idle, Version: 1, Threshold: deadline})
		require.NoError(t, err)
		return got
	}
	idle()
	c := idle()
	claimed, err := s.Transition(ctx, state.Change{InstanceID: c.ID, Pool: testPool, From: state.Idle, To: state.Claimed, Version: c.Version,
		Threshold: deadline, Reuse: state.ReuseAny, Assign: &state.Assignment{RunID: "911", RunAttempt: 2, Repo: "octo/lib"}})
	require.NoError(t, err)
	r := idle()
	r, err = s.Transition(ctx, state.Change{InstanceID: r.ID, Pool: testPool, From: state.Idle, To: state.Claimed, Version: r.Version,
		Threshold: deadline, Reuse: state.ReuseAny, Assign: &state.Assignment{RunID: "912", RunAttempt: 1, Repo: "octo/app"}})
	require.NoError(t, err)
	running, err := s.Transition(ctx, state.Change{InstanceID: r.ID, Pool: testPool, From: state.Claimed, To: state.Running, Version: r.Version, RunID: "912", Threshold: deadline})
	require.NoError(t, err)

	got, err := s.Holding(ctx, testPool)
	require.NoError(t, err)
	byID := map[string]state.Instance{}
	for _, in := range got {
		byID[in.ID] = in
	}
	require.ElementsMatch(t, []string{booting.ID, claimed.ID, running.ID}, keysOf(byID))
	h := byID[claimed.ID]
	require.Equal(t, "911", h.RunID)
	require.Equal(t, 2, h.RunAttempt)
	require.Equal(t, "octo/lib", h.Repo)
	require.True(t, h.Claimed)
	require.Equal(t, claimed.AssignedAt, h.AssignedAt)
	require.Equal(t, state.Claimed, h.State)
	require.Equal(t, 0.0357, h.Price)
	require.Equal(t, state.PriceSpot, h.PriceSource)
	require.Equal(t, "c7i.large", h.InstanceType)
	require.Equal(t, running.RegisteredAt, byID[running.ID].RegisteredAt)
	require.Empty(t, h.AZ, "only what says the hold is read")
	require.Zero(t, h.Version)
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
