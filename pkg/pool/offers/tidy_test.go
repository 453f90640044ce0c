package offers_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// TestTidy: the pool's offers are made to agree with its items. Stale offers (the instance was
// claimed by a claimer that died before deleting the message, or stopped and offered again) and
// duplicates are deleted, poison moves to the dead-letter queue, an idle instance without an
// offer is offered again, and an offer newer than the caller's read is kept after reading its item.
func TestTidy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testbed.Context(t, 2*time.Minute)

	kept := e.idle(spotC7)
	doubled := e.idle(spotC7)
	require.NoError(t, e.queue.Publish(ctx, doubled)) // offered twice
	taken := e.idle(spotC7)
	_, err := e.store.Transition(ctx, state.Change{InstanceID: taken.ID, Pool: poolName, From: state.Idle, To: state.Claimed,
		Version: taken.Version, Assign: &state.Assignment{RunID: "31", Repo: "octo/app"}, Threshold: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	restopped := e.idle(spotC7)
	stopped, err := e.store.Transition(ctx, state.Change{InstanceID: restopped.ID, Pool: poolName, From: state.Idle, To: state.Stopped,
		Version: restopped.Version, Threshold: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.NoError(t, e.queue.Publish(ctx, stopped)) // the idle offer is superseded
	// Idle without an offer: a release killed between its write and its publish.
	lost := &state.Instance{ID: newID(), Pool: poolName, Threshold: time.Now().Add(10 * time.Minute), Spec: spotC7}
	require.NoError(t, e.store.Create(ctx, []*state.Instance{lost}))
	lostIdle, err := e.store.Transition(ctx, state.Change{InstanceID: lost.ID, Pool: poolName, From: state.Created, To: state.Idle,
		Version: 1, Threshold: time.Now().Add(30 * time.Minute)})
	require.NoError(t, err)
	_, err = e.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &e.url, MessageBody: aws.String("not json")})
	require.NoError(t, err)
	// Made idle and offered after the caller read the pool's instances (a release meanwhile).
	late := e.idle(spotC7)

	offered := []state.Instance{*kept, *doubled, *stopped, *lostIdle}
	st, err := e.queue.Tidy(ctx, offered, e.store)
	require.NoError(t, err)
	require.Empty(t, st.Skipped)
	require.Equal(t, 8, st.Checked, "every offer read: kept, doubled twice, taken, restopped twice, poison, late")
	require.Equal(t, 3, st.Dropped, "the duplicate, the taken instance's and the superseded idle offer")
	require.Equal(t, 1, st.Poison)
	require.Equal(t, 1, st.Reoffered, "the instance without an offer")
	require.Equal(t, 4, st.Kept, "kept, doubled once, restopped as stopped, late")

	require.Equal(t, map[string]int{kept.ID: 1, doubled.ID: 1, restopped.ID: 1, lost.ID: 1, late.ID: 1}, e.offered(),
		"one offer per idle or stopped instance, none for the claimed one")
	require.Len(t, drain(t, e.sqs, e.dlqURL), 1, "the poison message moved to the dead-letter queue")
}

// TestTidyReadsNoItemForCurrentOffers: offers that match the caller's idle instances by version
// are given back as they were, without reading a single item.
func TestTidyReadsNoItemForCurrentOffers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testbed.Context(t, time.Minute)
	a, b := e.idle(spotC7), e.idle(spotC7)

	items := &countingItems{Items: e.store}
	st, err := e.queue.Tidy(ctx, []state.Instance{*a, *b}, items)
	require.NoError(t, err)
	require.Equal(t, 2, st.Visible)
	require.Equal(t, 2, st.Checked)
	require.Equal(t, 2, st.Kept)
	require.Zero(t, st.Dropped+st.Reoffered+st.Poison)
	require.Zero(t, items.calls, "no item read")
	require.Equal(t, map[string]int{a.ID: 1, b.ID: 1}, e.offered())
}

// countingItems counts GetMany calls.
type countingItems struct {
	offers.Items
	calls int
}

func (c *countingItems) GetMany(ctx context.Context, ids []string) (map[string]*state.Instance, error) {
	c.calls++
	return c.Items.GetMany(ctx, ids)
}

// TestTidyLeavesHeldOffersAlone: while a claimer holds offers, a tidy cannot tell them from
// missing ones; it changes nothing, and does not offer the held instances again.
func TestTidyLeavesHeldOffersAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testbed.Context(t, time.Minute)
	a, b := e.idle(spotC7), e.idle(spotC7)
	held, err := e.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &e.url, MaxNumberOfMessages: 1, VisibilityTimeout: 60})
	require.NoError(t, err)
	require.Len(t, held.Messages, 1)
	heldOffer, err := offers.ParseMessage(aws.ToString(held.Messages[0].Body), poolName)
	require.NoError(t, err)

	st, err := e.queue.Tidy(ctx, []state.Instance{*a, *b}, e.store)
	require.NoError(t, err)
	require.Equal(t, 1, st.InFlight)
	require.Equal(t, 0, st.Checked)
	require.Equal(t, 0, st.Reoffered)
	visible := e.offered()
	require.Len(t, visible, 1, "only the offer nobody holds is visible")
	require.NotContains(t, visible, heldOffer.InstanceID, "the held offer is not duplicated")
}

// TestTidyRenewsOftenReceivedOffers: an offer received many times (by tidies and by claimers it
// did not fit) is sent again as a fresh message before the queue's redrive policy could take it
// for poison; the pool still offers the instance exactly once.
func TestTidyRenewsOftenReceivedOffers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testbed.Context(t, time.Minute)
	in := e.idle(spotC7)
	// Received and given back 20 times, as claimers the offer does not fit do. Once, on a busy
	// machine, a one-second long poll of moto's came back empty with the offer given back just
	// before it (not reproduced since): this is the test's setup, not what it tests, so an empty
	// receive is asked again, up to a bound.
	for received, tries := 0, 0; received < 20; tries++ {
		require.Less(t, tries, 40, "the offer was received only %d times in %d receives", received, tries)
		out, err := e.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &e.url, MaxNumberOfMessages: 1, VisibilityTimeout: 30, WaitTimeSeconds: 1})
		require.NoError(t, err)
		if len(out.Messages) == 0 {
			continue
		}
		require.Len(t, out.Messages, 1)
		received++
		_, err = e.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &e.url, ReceiptHandle: out.Messages[0].ReceiptHandle})
		require.NoError(t, err)
	}

	st, err := e.queue.Tidy(ctx, []state.Instance{*in}, e.store)
	require.NoError(t, err)
	require.Equal(t, 1, st.Kept)
	require.Equal(t, 1, st.Renewed)
	require.Zero(t, st.Dropped)
	out, err := e.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &e.url, MaxNumberOfMessages: 10, VisibilityTimeout: 60, WaitTimeSeconds: 1,
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount}})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1, "offered exactly once")
	require.Equal(t, "1", out.Messages[0].Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)], "a fresh message")
	msg, err := offers.ParseMessage(aws.ToString(out.Messages[0].Body), poolName)
	require.NoError(t, err)
	require.Equal(t, in.ID, msg.InstanceID)
	require.Equal(t, in.Version, msg.Version)
}
