package offers_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// TestTidy: the pool's offers are made to agree with its items. Stale offers (the instance was
// claimed by a claimer that died before deleting the message, or stopped and offered again) and
// duplicates are deleted, poison moves to the dead-letter queue, an idle instance without an
// offer is offered again, and an offer newer than the caller's read is kept after reading its item.
func TestTidy(t *testing.T) {
	t.Parallel()
	w := newWorld(t)

	kept := w.idle(spotC7)
	doubled := w.idle(spotC7)
	require.NoError(t, w.queue.Publish(w.ctx, doubled)) // offered twice
	taken := w.claimFor(w.idle(spotC7), "31")
	restopped := w.idle(spotC7)
	stopped := w.stop(restopped)
	require.NoError(t, w.queue.Publish(w.ctx, stopped)) // the idle offer is superseded
	// Idle without an offer: a release killed between its write and its publish.
	lost := w.idleIn(w.pool, spotC7, false)
	w.send("not json")
	// Made idle and offered after the caller read the pool's instances (a release meanwhile).
	late := w.idle(spotC7)

	offered := []state.Instance{*kept, *doubled, *stopped, *lost}
	st, err := w.queue.Tidy(w.ctx, offered, w.Store)
	require.NoError(t, err)
	require.Empty(t, st.Skipped)
	require.Equal(t, 8, st.Visible)
	require.Equal(t, 8, st.Checked, "every offer read: kept, doubled twice, taken, restopped twice, poison, late")
	require.Equal(t, 3, st.Dropped, "the duplicate, the taken instance's and the superseded idle offer")
	require.Equal(t, 1, st.Poison)
	require.Equal(t, 1, st.Reoffered, "the instance without an offer")
	require.Equal(t, 4, st.Kept, "kept, doubled once, restopped as stopped, late")

	require.Equal(t, map[string]int{kept.ID: 1, doubled.ID: 1, restopped.ID: 1, lost.ID: 1, late.ID: 1}, w.offered(),
		"one offer per idle or stopped instance, none for the claimed one")
	visible, hidden := w.counts(w.Doc.QueueURL)
	require.Equal(t, 5, visible, "every kept offer given back at once")
	require.Zero(t, hidden)
	require.Equal(t, []string{"not json"}, w.SQS.Bodies(w.Doc.DeadLetterQueueURL), "the poison message moved to the dead-letter queue")
	require.Equal(t, "31", w.Store.Item(taken.ID).RunID, "the taken instance is its run's")
}

// TestTidyReadsNoItemForCurrentOffers: offers that match the caller's idle instances by version
// are given back as they were, without reading a single item.
func TestTidyReadsNoItemForCurrentOffers(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, b := w.idle(spotC7), w.idle(spotC7)

	reads := w.Store.Calls("GetMany")
	st, err := w.queue.Tidy(w.ctx, []state.Instance{*a, *b}, w.Store)
	require.NoError(t, err)
	require.Equal(t, 2, st.Visible)
	require.Equal(t, 2, st.Checked)
	require.Equal(t, 2, st.Kept)
	require.Zero(t, st.Dropped+st.Reoffered+st.Poison)
	require.Zero(t, st.ItemsRead)
	require.Equal(t, reads, w.Store.Calls("GetMany"), "no item read")
	require.Equal(t, map[string]int{a.ID: 1, b.ID: 1}, w.offered())
}

// TestTidyLeavesHeldOffersAlone: while a claimer holds offers, a tidy cannot tell them from
// missing ones; it changes nothing, and does not offer the held instances again.
func TestTidyLeavesHeldOffersAlone(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, b := w.idle(spotC7), w.idle(spotC7)
	held := w.receive(1, 60)
	require.Len(t, held, 1)
	heldOffer, err := offers.ParseMessage(aws.ToString(held[0].Body), w.pool)
	require.NoError(t, err)

	st, err := w.queue.Tidy(w.ctx, []state.Instance{*a, *b}, w.Store)
	require.NoError(t, err)
	require.Equal(t, 1, st.InFlight)
	require.Equal(t, 0, st.Checked)
	require.Equal(t, 0, st.Reoffered)
	require.NotEmpty(t, st.Skipped)
	require.Equal(t, map[string]int{a.ID: 1, b.ID: 1}, w.offered(), "one offer each: the held offer is not duplicated")
	visible, hidden := w.counts(w.Doc.QueueURL)
	require.Equal(t, 1, visible, "only the offer nobody holds is visible")
	require.Equal(t, 1, hidden, "the held one stays with its claimer")
	require.Contains(t, []string{a.ID, b.ID}, heldOffer.InstanceID)
}

// TestTidyRenewsOftenReceivedOffers: an offer received many times (by tidies and by claimers it
// did not fit) is sent again as a fresh message before the queue's redrive policy could take it
// for poison; the pool still offers the instance exactly once.
func TestTidyRenewsOftenReceivedOffers(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	in := w.idle(spotC7)
	// Received and given back 20 times, as claimers the offer does not fit do.
	for range 20 {
		msgs := w.receive(1, 30)
		require.Len(t, msgs, 1)
		out, err := w.SQS.ChangeMessageVisibilityBatch(w.ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &w.Doc.QueueURL,
			Entries: []sqstypes.ChangeMessageVisibilityBatchRequestEntry{{Id: aws.String("0"), ReceiptHandle: msgs[0].ReceiptHandle}}})
		require.NoError(t, err)
		require.Empty(t, out.Failed)
	}

	st, err := w.queue.Tidy(w.ctx, []state.Instance{*in}, w.Store)
	require.NoError(t, err)
	require.Equal(t, 1, st.Kept)
	require.Equal(t, 1, st.Renewed)
	require.Zero(t, st.Dropped)
	msgs := w.receive(10, 60)
	require.Len(t, msgs, 1, "offered exactly once")
	require.Len(t, w.SQS.Bodies(w.Doc.QueueURL), 1, "the old message deleted")
	require.Equal(t, "1", msgs[0].Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)], "a fresh message")
	msg, err := offers.ParseMessage(aws.ToString(msgs[0].Body), w.pool)
	require.NoError(t, err)
	require.Equal(t, in.ID, msg.InstanceID)
	require.Equal(t, in.Version, msg.Version)
}
