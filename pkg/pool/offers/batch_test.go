package offers_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestClaimsOfOneReceiveInOneTransaction: ten offers received together are claimed by one
// TransitionAll, and each claimed item holds the run. When one of the ten was taken by another
// run after it was offered, the batch is settled for that one alone: the nine others are claimed
// one by one, the taken one is left to its holder and its message dropped. (That state.Store
// writes such a batch as one transaction, and settles a cancelled one so, is state's
// TestTransitionAll, against DynamoDB Local.)
func TestClaimsOfOneReceiveInOneTransaction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		taken  bool
		single int
	}{
		{name: "all ten free", single: 0},
		{name: "one of ten taken meanwhile", taken: true, single: 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			var ids []string
			for range 10 {
				ids = append(ids, w.idle(spotC7).ID)
			}
			if tc.taken {
				w.move(state.Change{InstanceID: ids[4], From: state.Idle, To: state.Claimed, Version: w.Store.Item(ids[4]).Version,
					Assign: &state.Assignment{RunID: "99", Repo: "octo/other"}})
			}
			transactions, single := w.Store.Calls("TransitionAll"), w.Store.Calls("Transition")

			res, err := w.selector().Claim(w.ctx, request("21", 10))
			require.NoError(t, err)
			want := 10
			if tc.taken {
				want = 9
				require.Equal(t, 1, res.Stats.Lost, "the taken instance's offer is stale")
			}
			require.Len(t, res.Instances, want)
			require.Equal(t, 1, w.Store.Calls("TransitionAll")-transactions, "claims of one receive: one request")
			require.Equal(t, tc.single, w.Store.Calls("Transition")-single, "singles only for the items a settled batch left")
			for _, id := range ids {
				got := w.Store.Item(id)
				require.Equal(t, state.Claimed, got.State, id)
				if tc.taken && id == ids[4] {
					require.Equal(t, "99", got.RunID, "the other run keeps what it took")
					continue
				}
				require.Equal(t, "21", got.RunID, id)
			}
			for _, in := range res.Instances {
				require.Equal(t, state.Claimed, in.State)
				require.Equal(t, "21", in.RunID)
				require.Equal(t, spotC7.InstanceType, in.InstanceType, "a batch claim carries its offer's spec")
			}
			require.Empty(t, w.offered(), "every used or stale message is deleted")
		})
	}
}
