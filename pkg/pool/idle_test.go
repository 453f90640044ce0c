package pool_test

import (
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// TestToIdleThenOffer: an instance given back is idle with its pool's idle deadline, its doorbell
// rung, and its offer, at the version written, is on the pool's queue; nothing reaches EC2.
func TestToIdleThenOffer(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	w.Agent.SetDefault(fake.Silent)
	in := claimed(t, w, 1, "42")[0]
	w.SQS.Reset()
	at := time.Now()

	out, err := w.Pool.ToIdle(ctx(t), pool.Back{Instance: in, Idle: w.Doc.Timeout(state.Idle), RunID: "42", At: at, Reason: "released by run 42"})
	require.NoError(t, err)
	res := w.Pool.OfferOrRetire(ctx(t), w.Doc, []*state.Instance{out})
	require.NoError(t, res.Err)
	require.Empty(t, res.Retired)
	require.Equal(t, []string{in.ID}, []string{res.Offered[0].ID})

	it := w.Store.Item(in.ID)
	require.Equal(t, state.Idle, it.State)
	require.Empty(t, it.RunID)
	require.Equal(t, "released by run 42", it.StateReason)
	require.WithinDuration(t, at.Add(w.Doc.Timeout(state.Idle)), it.Threshold, time.Second, "the pool's idle deadline, from At")
	require.Contains(t, w.SQS.Bodies(w.Bells.URL(in.ID)), "read your item", "its agent is rung")
	msgs, err := w.SQS.Offers(w.Doc.QueueURL, w.Doc.Name)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.Equal(t, in.ID, msgs[0].InstanceID)
	require.Equal(t, it.Version, msgs[0].Version, "offered at the version written")
	require.Zero(t, w.EC2.Calls("TerminateInstances"))
}

// TestOfferOrRetireWhatMayNotBeReused: an instance whose item says it may not be offered again,
// marked to retire while it served the run (a drain) or by its claim (a pool whose reuse is
// never), or whose item does not say where it goes back, is terminated (item and EC2), and not
// offered, by its item alone; so is one whose pool's document, as the caller has it now, says
// so (a pool made reuse never since the claim).
func TestOfferOrRetireWhatMayNotBeReused(t *testing.T) {
	t.Parallel()
	never := "its pool's reuse is never: one run per instance"
	tests := []struct {
		name   string
		mark   string // the reason the item is marked to retire with while it serves the run
		home   func(*state.Home)
		reason string
	}{
		{"marked while serving", "its pool is drained", nil, "its pool is drained"},
		{"reuse never, as its claim wrote", "", func(h *state.Home) { h.Retire = never }, never},
		{"no way back", "", func(h *state.Home) { *h = state.Home{} }, "its item does not say where it goes back"},
		{"reuse never since the claim, as the caller's document says", "", nil, never},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := fake.NewWorld(t, nil)
			w.Agent.SetDefault(fake.Silent)
			in := claimed(t, w, 1, "42")[0]
			if tc.home != nil {
				it := *w.Store.Item(in.ID)
				tc.home(&it.Home)
				w.Store.Put(it)
				in = *w.Store.Item(in.ID)
			}
			w.SQS.Reset()
			back := pool.Back{Instance: in, Idle: w.Doc.Timeout(state.Idle), RunID: "42", Reason: "released by run 42"}
			if tc.mark != "" {
				marked, ok, err := w.Store.MarkRetire(ctx(t), in.ID, "42", tc.mark)
				require.NoError(t, err)
				require.True(t, ok)
				require.Equal(t, in.Version, marked.Version, "a mark moves no version: no transition in flight loses")
				// A give-back from the item as read before the mark loses, and is told of it.
				_, err = w.Pool.ToIdle(ctx(t), back)
				var conflict *state.ConflictError
				require.ErrorAs(t, err, &conflict)
				require.Equal(t, tc.mark, conflict.Current.Retire)
				back.Instance = *marked
			}
			out, err := w.Pool.ToIdle(ctx(t), back)
			require.NoError(t, err)
			require.Equal(t, in.Retire+tc.mark, out.Retire, "the mark outlives the move to idle")
			var doc *pooldoc.Document // the item alone
			if tc.mark == "" && tc.home == nil {
				now := *w.Doc
				now.Reuse = state.ReuseNever
				doc = &now
			}
			res := w.Pool.OfferOrRetire(ctx(t), doc, []*state.Instance{out})
			require.NoError(t, res.Err)
			require.Empty(t, res.Offered)
			require.Len(t, res.Retired, 1)
			require.Equal(t, tc.reason, res.Retired[0].Reason)
			require.NoError(t, res.Retired[0].Err)
			require.Equal(t, []string{in.ID}, instanceIDs(res.Retired[0].Ended))
			it := w.Store.Item(in.ID)
			require.Equal(t, state.Terminated, it.State)
			require.Equal(t, tc.reason, it.StateReason)
			require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(in.ID))
			require.Empty(t, w.Offered(t), "no offer")
			require.Zero(t, w.SSM.Calls("GetParameter")+w.SSM.Calls("GetParametersByPath"), "no pool document read")
		})
	}
}

// TestToIdleLost: a conditional write that lost (the instance moved on since it was read) leaves
// the instance alone: the error holds it as it is now, and nothing is offered, rung or terminated.
func TestToIdleLost(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	w.Agent.SetDefault(fake.Silent)
	in := claimed(t, w, 1, "42")[0]
	running, err := w.Store.Transition(ctx(t), state.Change{InstanceID: in.ID, Pool: in.Pool, From: state.Claimed, To: state.Running,
		Version: in.Version, RunID: "42", Threshold: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	w.SQS.Reset()

	out, err := w.Pool.ToIdle(ctx(t), pool.Back{Instance: in, Idle: w.Doc.Timeout(state.Idle), RunID: "42", Reason: "released by run 42"})
	require.Nil(t, out)
	var conflict *state.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, state.Running, conflict.Current.State)
	it := w.Store.Item(in.ID)
	require.Equal(t, state.Running, it.State)
	require.Equal(t, running.Version, it.Version)
	require.Empty(t, w.Offered(t))
	require.Empty(t, w.SQS.Bodies(w.Bells.URL(in.ID)), "not rung")
	require.Zero(t, w.EC2.Calls("TerminateInstances"))
}
