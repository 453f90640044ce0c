package operator_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/operator"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// drainWorld is one pool's items, read, marked and retired as the state store would, with a hook
// that moves an item between the drain's read and its write (a release, a claim).
type drainWorld struct {
	mu     sync.Mutex
	items  map[string]*state.Instance
	before func(id string) // runs before each mark or retire of id
}

func (w *drainWorld) move(id string) {
	if w.before != nil {
		w.before(id)
	}
}

func (w *drainWorld) InPoolState(_ context.Context, _ string, st state.State) ([]state.Instance, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []state.Instance
	for _, in := range w.items {
		if in.State == st {
			out = append(out, *in)
		}
	}
	return out, nil
}

func (w *drainWorld) RunRecords(context.Context, string, time.Time, time.Time) ([]state.RunRecord, error) {
	return nil, nil
}
func (w *drainWorld) Holding(context.Context, string) ([]state.Instance, error) { return nil, nil }
func (w *drainWorld) Ended(context.Context, string, time.Time, time.Time) ([]state.Instance, error) {
	return nil, nil
}

func (w *drainWorld) MarkRetire(_ context.Context, id, run, why string) (*state.Instance, bool, error) {
	w.move(id)
	w.mu.Lock()
	defer w.mu.Unlock()
	in := w.items[id]
	if in.RunID != run {
		cur := *in
		return &cur, false, nil
	}
	in.Retire = why
	cur := *in
	return &cur, true, nil
}

func (w *drainWorld) Retire(_ context.Context, insts []state.Instance, _ pool.Reason) pool.Retired {
	var res pool.Retired
	for _, in := range insts {
		w.move(in.ID)
		w.mu.Lock()
		cur := w.items[in.ID]
		if cur.State != in.State || cur.Version != in.Version {
			res.Lost = append(res.Lost, *cur)
		} else {
			cur.State = state.Terminated
			res.Ended = append(res.Ended, in)
		}
		w.mu.Unlock()
	}
	return res
}

func (w *drainWorld) SetDrained(context.Context, string, bool) (*pooldoc.Document, error) {
	return &pooldoc.Document{Name: "x64", Drained: true}, nil
}

// TestDrainFollowsRaces: an instance serving a run is marked; one given back between the
// drain's read and its mark is terminated as idle; one another run took meanwhile, or a claim
// took from under the drain's termination, is marked for the run that holds it now. None is
// left unmarked and alive.
func TestDrainFollowsRaces(t *testing.T) {
	t.Parallel()
	w := &drainWorld{items: map[string]*state.Instance{
		"i-serving": {ID: "i-serving", Pool: "x64", State: state.Running, Version: 4, Assignment: state.Assignment{RunID: "1"}},
		"i-freed":   {ID: "i-freed", Pool: "x64", State: state.Running, Version: 4, Assignment: state.Assignment{RunID: "2"}},
		"i-retaken": {ID: "i-retaken", Pool: "x64", State: state.Running, Version: 4, Assignment: state.Assignment{RunID: "3"}},
		"i-claimed": {ID: "i-claimed", Pool: "x64", State: state.Idle, Version: 2},
	}}
	moved := map[string]bool{}
	w.before = func(id string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if moved[id] {
			return
		}
		moved[id] = true
		in := w.items[id]
		switch id {
		case "i-freed": // its run released it
			in.State, in.Version, in.RunID = state.Idle, 5, ""
		case "i-retaken": // released, then claimed by run 4
			in.State, in.Version, in.RunID = state.Claimed, 6, "4"
		case "i-claimed": // a provision that read the document before the drain claimed it
			in.State, in.Version, in.RunID = state.Claimed, 3, "5"
		}
	}
	stack := &pooldoc.Stack{Name: "ci", Pools: []*pooldoc.Document{{Name: "x64"}}}
	insp, err := operator.New(operator.Deps{Stack: stack, Store: &fakeStore{}, Queues: fakeQueues{}, History: w,
		Documents: w, Retirer: w, Marker: w})
	require.NoError(t, err)

	rep, err := insp.Drain(context.Background(), "x64")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"i-serving", "i-retaken", "i-claimed"}, rep.Serving)
	require.Equal(t, []string{"i-freed"}, rep.Retired)
	require.Empty(t, rep.Lost)
	for id, in := range w.items {
		if in.State == state.Terminated {
			continue
		}
		require.Equal(t, pooldoc.DrainedReason, in.Retire, "%s, %s for run %s, is marked", id, in.State, in.RunID)
	}
	require.Equal(t, state.Terminated, w.items["i-freed"].State)
}
