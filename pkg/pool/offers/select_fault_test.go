package offers_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// TestClaimRetriedAfterApplied: a claim whose retry reports a conflict against our own write is
// recognised as won; the same conflict against the claim of another provision of the same run
// (a duplicated offer taken by both) is not, so one instance is never credited to two.
func TestClaimRetriedAfterApplied(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, holder string
		won          bool
	}{{"our own write", "claim-a", true}, {"another provision of the run", "claim-b", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			in := w.idle(spotC7)
			// The first attempt's write went through; its answer was lost, and the SDK's retry
			// meets the item as that write (or the other provision's) left it.
			first := w.move(state.Change{InstanceID: in.ID, From: state.Idle, To: state.Claimed, Version: in.Version,
				Assign: &state.Assignment{RunID: "5", Repo: "octo/app", ClaimID: tc.holder}})

			res, err := w.selector().Claim(w.ctx, offers.Request{Count: 1,
				Assign: state.Assignment{RunID: "5", Repo: "octo/app", ClaimID: "claim-a"}, ClaimDeadline: time.Now().Add(time.Minute)})
			require.NoError(t, err)
			if tc.won {
				require.Len(t, res.Instances, 1)
				require.Equal(t, in.ID, res.Instances[0].ID)
				require.Equal(t, first.Version, res.Instances[0].Version)
				require.Zero(t, res.Stats.Lost)
			} else {
				require.Empty(t, res.Instances, "held by the other provision: not ours")
				require.Equal(t, 1, res.Stats.Lost)
			}
			require.Equal(t, *first, *w.Store.Item(in.ID), "nothing written again")
			require.Empty(t, w.offered(), "the offer is deleted either way")
		})
	}
}

// TestClaimStoreFailure: a claim that fails for another reason than a lost race gives the
// message back, reports the error, and keeps what was won.
func TestClaimStoreFailure(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	won := w.idle(spotC7)
	// A stopped offer is claimed after the hot one, in a write of its own: that one fails.
	failed := w.stop(w.idleIn(w.pool, spotC7, false))
	require.NoError(t, w.queue.Publish(w.ctx, failed))
	w.Store.Inject("Transition", nil, errors.New("throttled after retries"))

	res, err := w.selector().Claim(w.ctx, request("5", 2))
	require.ErrorContains(t, err, "throttled after retries")
	require.Len(t, res.Instances, 1, "the won claim is kept")
	require.Equal(t, won.ID, res.Instances[0].ID)
	require.Equal(t, state.Claimed, w.Store.Item(won.ID).State)
	require.Equal(t, *failed, *w.Store.Item(failed.ID), "the failed claim wrote nothing")
	require.Equal(t, map[string]int{failed.ID: 1}, w.offered(), "the won claim's offer deleted, the failed one's kept")
	visible, hidden := w.counts(w.Doc.QueueURL)
	require.Equal(t, 1, visible, "the failed claim's message is given back")
	require.Zero(t, hidden)
}

// TestClaimRefusedByItsConditionGivesTheOfferBack: a claim that loses although the item is just
// as offered (the reuse scope or a stale heartbeat refused it) leaves the offer for others.
func TestClaimRefusedByItsConditionGivesTheOfferBack(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	in := w.idle(spotC7) // its agent never beat: no heartbeat at all
	req := request("5", 1)
	req.AliveSince = time.Now().Add(-time.Minute)

	res, err := w.selector().Claim(w.ctx, req)
	require.NoError(t, err)
	require.Empty(t, res.Instances)
	require.Zero(t, res.Stats.Lost)
	require.Equal(t, *in, *w.Store.Item(in.ID), "the item as it was")
	require.Equal(t, map[string]int{in.ID: 1}, w.offered(), "the offer is not deleted")
	visible, hidden := w.counts(w.Doc.QueueURL)
	require.Equal(t, 1, visible, "it is given back")
	require.Zero(t, hidden)
}

// heldDeletes is the fake SQS with every DeleteMessageBatch held until release is closed;
// deleting is closed once the first is held.
type heldDeletes struct {
	awsapi.SQS
	once              sync.Once
	deleting, release chan struct{}
}

func (h *heldDeletes) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	h.once.Do(func() { close(h.deleting) })
	<-h.release
	return h.SQS.DeleteMessageBatch(ctx, in, o...)
}

// TestClaimAsyncReturnsBeforeTheTidy: the claimed instances come back while the used messages
// are still being deleted (the hand-overs need not wait for it), and tidy returns only once they
// are deleted.
func TestClaimAsyncReturnsBeforeTheTidy(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, b, third := w.idle(spotC7), w.idle(spotC7), w.idle(spotC7)
	client := &heldDeletes{SQS: w.SQS, deleting: make(chan struct{}), release: make(chan struct{})}
	q, err := offers.NewQueue(client, w.pool, w.Doc.QueueURL, w.Doc.DeadLetterQueueURL)
	require.NoError(t, err)

	res, tidy, err := (&offers.Selector{Queue: q, Store: w.Store}).ClaimAsync(w.ctx, offers.Request{Count: 2,
		Assign: state.Assignment{RunID: "5", Repo: "octo/app", ClaimID: "claim-a"}, ClaimDeadline: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{a.ID, b.ID}, []string{res.Instances[0].ID, res.Instances[1].ID}, "returned while the deletes are held")
	tidied := make(chan struct{})
	go func() { tidy(); close(tidied) }()
	select {
	case <-client.deleting:
	case <-time.After(30 * time.Second):
		t.Fatal("the used messages were never deleted")
	}
	select {
	case <-tidied:
		t.Fatal("tidy returned before the used messages were deleted")
	default:
	}
	close(client.release)
	select {
	case <-tidied:
	case <-time.After(30 * time.Second):
		t.Fatal("tidy did not return once the deletes went through")
	}
	require.Equal(t, map[string]int{third.ID: 1}, w.offered(), "the used offers deleted, the third left for the next claimer")
}
