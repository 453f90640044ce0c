package operator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/operator"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

type fakeStore struct {
	census map[string]state.Census
	items  map[string]*state.Instance
}

func (f *fakeStore) Census(_ context.Context, pool string) (state.Census, error) {
	c, ok := f.census[pool]
	if !ok {
		return state.Census{}, errors.New("throttled")
	}
	return c, nil
}

func (f *fakeStore) GetMany(_ context.Context, ids []string) (map[string]*state.Instance, error) {
	out := map[string]*state.Instance{}
	for _, id := range ids {
		if in, ok := f.items[id]; ok {
			out[id] = in
		}
	}
	return out, nil
}

func (f *fakeStore) Get(_ context.Context, id string) (*state.Instance, error) {
	if in, ok := f.items[id]; ok {
		return in, nil
	}
	return nil, state.ErrNotFound
}

type fakeQueues map[string]offers.Counts

func (f fakeQueues) Tidy(context.Context, string, []state.Instance, offers.Items) (offers.TidyStats, error) {
	return offers.TidyStats{}, nil
}

func (f fakeQueues) QueueCounts(_ context.Context, _, url, _ string) (offers.Counts, error) {
	return f.Counts(context.Background(), url)
}

func (f fakeQueues) Counts(_ context.Context, pool string) (offers.Counts, error) {
	c, ok := f[pool]
	if !ok {
		return offers.Counts{}, errors.New("queue gone")
	}
	return c, nil
}

func newInspector(t *testing.T) *operator.Operator {
	t.Helper()
	stack := &pooldoc.Stack{Name: "ci", Pools: []*pooldoc.Document{
		{Name: "x64", SpecHash: "new", Warm: pooldoc.Warm{Schedules: []pooldoc.Schedule{{Name: "always", Hot: 3, Stopped: 1}}}},
		{Name: "arm", SpecHash: "new", Jobs: &pooldoc.Jobs{Labels: []string{"arm"}, QueueURL: "jobs-queue", DeadLetterQueueURL: "jobs-dlq"}},
	}}
	store := &fakeStore{
		census: map[string]state.Census{"x64": {
			ByState:       map[state.State]int{state.Created: 3, state.Idle: 2, state.Claimed: 1, state.Running: 4, state.Stopped: 1},
			CreatedForRun: 1,
			BySpec:        map[string]int{"new": 8, "old": 3},
		}},
		items: map[string]*state.Instance{"i-0123456789abcdef0": {ID: "i-0123456789abcdef0", Pool: "x64", State: state.Terminated,
			StateReason: "its agent reported FAILED", Report: state.Report{Signal: state.SignalFailed, SignalLog: "left a process behind"}}},
	}
	in, err := operator.New(operator.Deps{Stack: stack, Store: store, Queues: fakeQueues{"x64": {Offers: 2, InFlight: 1, DeadLetters: 4}, "jobs-queue": {Offers: 7, InFlight: 3, DeadLetters: 2}},
		Now: func() time.Time { return time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC) }})
	require.NoError(t, err)
	return in
}

// TestStatus: a pool's census and queue counts become its row; what cannot be read is named in
// the row's errors (the other pools still answer); an unknown pool is bad input naming the pools.
func TestStatus(t *testing.T) {
	t.Parallel()
	in := newInspector(t)
	st, err := in.Status(context.Background())
	require.NoError(t, err)
	require.Len(t, st, 2)
	x := st[0]
	require.Equal(t, operator.PoolStatus{Pool: "x64", Idle: 2, Warming: 2, Booting: 1, Claimed: 1, Running: 4, Stopped: 1, Live: 11,
		Offers: 2, InFlight: 1, DeadLetters: 4, Target: pooldoc.Target{Schedule: "always", Hot: 3, Stopped: 1}, SpecHash: "new", OnSpec: 8}, x)
	arm := st[1]
	require.Equal(t, "arm", arm.Pool)
	require.Len(t, arm.Errors, 2, "census and queue both failed: %v", arm.Errors)
	require.Contains(t, arm.Errors[0], "throttled")
	require.Contains(t, arm.Errors[1], "queue gone")

	jobs, err := in.Jobs(context.Background())
	require.NoError(t, err)
	require.Equal(t, &operator.JobsStatus{Waiting: 7, InFlight: 3, DeadLetters: 2}, jobs, "the stack's jobs queue, from the pool that serves jobs")

	_, err = in.Status(context.Background(), "arm", "gpu")
	require.ErrorIs(t, err, operator.ErrBadInput)
	require.ErrorContains(t, err, `pool "gpu": no such pool in stack ci: want one of x64, arm`)
	require.ErrorIs(t, err, operator.ErrUnknown, "names nothing in the stack")
}

// TestInstance: a malformed or unknown id is bad input; a failed instance says why it ended.
func TestInstance(t *testing.T) {
	t.Parallel()
	in := newInspector(t)
	for _, id := range []string{"web-1", "i-0fffffffffffffff0"} {
		_, err := in.Instance(context.Background(), id)
		require.ErrorIs(t, err, operator.ErrBadInput, id)
	}
	r, err := in.Instance(context.Background(), "i-0123456789abcdef0")
	require.NoError(t, err)
	require.Equal(t, "its agent reported FAILED", r.Ended)
	require.Equal(t, "left a process behind", r.LogTail)
}
