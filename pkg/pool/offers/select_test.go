package offers_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// TestClaimOne: a published idle instance is claimed for the run, and its message is gone.
func TestClaimOne(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	in := w.idle(spotC7)

	res, err := w.selector().Claim(w.ctx, request("11", 1))
	require.NoError(t, err)
	require.Len(t, res.Instances, 1)
	got := res.Instances[0]
	require.Equal(t, in.ID, got.ID)
	require.Equal(t, state.Claimed, got.State)
	require.Equal(t, "11", got.RunID)
	require.Equal(t, "octo/app", got.Repo)
	require.Equal(t, *got, *w.Store.Item(in.ID), "returned as written")
	require.Equal(t, offers.Stats{Receives: 1, Received: 1, Claimed: 1}, res.Stats)
	require.Empty(t, w.offered(), "the used message is deleted")
}

// TestClaimFromEmptyPool: a pool with nothing offered answers at once, without a long poll: one
// receive that does not wait and one read of the queue's counts. An offer made right after is
// not swallowed by anything that claim left behind: it is visible at once, nothing is in flight,
// and the next claim takes it with a single receive.
func TestClaimFromEmptyPool(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	sel := w.selector()
	sel.Wait = 20 * time.Second // were it to long-poll an empty pool, Stats would show a second receive
	res, err := sel.Claim(w.ctx, request("12", 3))
	require.NoError(t, err)
	require.Empty(t, res.Instances)
	require.Equal(t, offers.Stats{Receives: 1, Counts: 1}, res.Stats, "no long poll")
	require.Equal(t, 1, w.SQS.Calls("ReceiveMessage"))

	in := w.idle(spotC7)
	visible, hidden := w.counts(w.Doc.QueueURL)
	require.Equal(t, 1, visible, "the offer is visible")
	require.Zero(t, hidden, "nothing holds it")

	res, err = sel.Claim(w.ctx, request("13", 1))
	require.NoError(t, err)
	require.Len(t, res.Instances, 1)
	require.Equal(t, in.ID, res.Instances[0].ID)
	require.Equal(t, offers.Stats{Receives: 1, Received: 1, Claimed: 1}, res.Stats)
}

// TestClaimFilters: only fitting instances are claimed; the rest stay offered, once each.
func TestClaimFilters(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	want := map[string]bool{}
	var others []string
	specs := []state.Spec{
		{InstanceType: "c7i.large", UsageClass: state.UsageSpot, VCPU: 2, MemoryMiB: 4096},
		{InstanceType: "c7i.xlarge", UsageClass: state.UsageSpot, VCPU: 4, MemoryMiB: 8192},
		{InstanceType: "c6i.2xlarge", UsageClass: state.UsageOnDemand, VCPU: 8, MemoryMiB: 16384},
		{InstanceType: "m7g.xlarge", UsageClass: state.UsageSpot, VCPU: 4, MemoryMiB: 16384},
		{InstanceType: "t3.micro", UsageClass: state.UsageSpot, VCPU: 2, MemoryMiB: 1024},
	}
	for range 3 {
		for i, sp := range specs {
			in := w.idle(sp)
			if i == 1 { // spot, c*, >= 4 vCPU, >= 8 GiB
				want[in.ID] = true
			} else {
				others = append(others, in.ID)
			}
		}
	}
	req := request("13", 3)
	req.UsageClass, req.InstanceTypes, req.MinVCPU, req.MinMemoryMiB = state.UsageSpot, []string{"c*", "t*"}, 4, 8192
	res, err := w.selector().Claim(w.ctx, req)
	require.NoError(t, err)
	require.Len(t, res.Instances, 3)
	for _, in := range res.Instances {
		require.True(t, want[in.ID], "%s (%s) does not fit", in.ID, in.InstanceType)
	}
	offered := w.offered()
	require.Len(t, offered, len(others))
	for _, id := range others {
		require.Equal(t, 1, offered[id], "%s offered once", id)
		require.Equal(t, state.Idle, w.Store.Item(id).State, "%s left alone", id)
	}
	visible, hidden := w.counts(w.Doc.QueueURL)
	require.Equal(t, len(others), visible, "what did not fit is given back at once")
	require.Zero(t, hidden)
}

// TestStaleMessagesDropped: a message superseded by a newer offer of the same instance, one past
// its deadline, and one whose instance was claimed elsewhere are all deleted, never used.
func TestStaleMessagesDropped(t *testing.T) {
	t.Parallel()
	w := newWorld(t)

	// Offered, then stopped and offered again: the first message is superseded.
	reoffered := w.idle(spotC7)
	stopped := w.stop(reoffered)
	require.NoError(t, w.queue.Publish(w.ctx, stopped))

	// Offered, then claimed directly by someone holding the message elsewhere (simulated by a
	// direct claim): its message is stale.
	taken := w.claimFor(w.idle(spotC7), "99")

	// Offered with a deadline in the past.
	expired := &state.Instance{ID: newID(), Pool: w.pool, Threshold: time.Now().Add(time.Minute), Spec: spotC7}
	require.NoError(t, w.Store.Create(w.ctx, []*state.Instance{expired}))
	exp := w.move(state.Change{InstanceID: expired.ID, From: state.Created, To: state.Idle, Version: 1, Threshold: time.Now().Add(-time.Second)})
	require.NoError(t, w.queue.Publish(w.ctx, exp))

	res, err := w.selector().Claim(w.ctx, request("14", 3))
	require.NoError(t, err)
	require.Len(t, res.Instances, 1, "only the re-offered (stopped) instance is claimable")
	require.Equal(t, reoffered.ID, res.Instances[0].ID)
	require.Equal(t, stopped.Version+1, res.Instances[0].Version, "claimed through the newer offer")
	require.Equal(t, []string{reoffered.ID}, res.Stopped)
	require.Equal(t, 1, res.Stats.Claimed)
	require.Equal(t, 3, res.Stats.Lost+res.Stats.Stale, "superseded, taken and expired messages dropped")
	require.Empty(t, w.offered(), "nothing stale remains")

	require.Equal(t, state.Idle, w.Store.Item(exp.ID).State, "an expired offer is left for refresh to terminate")
	require.Equal(t, exp.Version, w.Store.Item(exp.ID).Version)
	require.Equal(t, "99", w.Store.Item(taken.ID).RunID, "the other run keeps what it took")
	require.Equal(t, taken.Version, w.Store.Item(taken.ID).Version)
}

// TestHotBeforeStopped: running instances are claimed first; stopped ones only to make up the
// count.
func TestHotBeforeStopped(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var stoppedIDs []string
	idle := []*state.Instance{w.idle(spotC7), w.idle(spotC7), w.idle(spotC7)}
	require.Len(t, w.receive(10, 60), 3, "the idle offers hidden; stopped ones replace them")
	for _, in := range idle {
		require.NoError(t, w.queue.Publish(w.ctx, w.stop(in)))
		stoppedIDs = append(stoppedIDs, in.ID)
	}
	hot := w.idle(spotC7)

	res, err := w.selector().Claim(w.ctx, request("15", 2))
	require.NoError(t, err)
	require.Len(t, res.Instances, 2)
	require.Equal(t, hot.ID, res.Instances[0].ID, "the hot instance first")
	require.Contains(t, stoppedIDs, res.Instances[1].ID)
	require.Equal(t, state.Claimed, res.Instances[1].State)
	require.Equal(t, []string{res.Instances[1].ID}, res.Stopped, "the caller learns which to start")

	res, err = w.selector().Claim(w.ctx, request("16", 1))
	require.NoError(t, err)
	require.Len(t, res.Instances, 1)
	require.Contains(t, stoppedIDs, res.Instances[0].ID)
	require.NotEqual(t, hot.ID, res.Instances[0].ID)
}

// attributed is the fake SQS with the message attributes of what is sent one by one kept by
// queue and body: the fake keeps a message's body alone.
type attributed struct {
	awsapi.SQS
	mu   sync.Mutex
	sent map[string]map[string][]map[string]sqstypes.MessageAttributeValue // url → body → attributes of each send
}

func (a *attributed) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	out, err := a.SQS.SendMessage(ctx, in, o...)
	if err == nil {
		a.mu.Lock()
		defer a.mu.Unlock()
		url, body := aws.ToString(in.QueueUrl), aws.ToString(in.MessageBody)
		if a.sent == nil {
			a.sent = map[string]map[string][]map[string]sqstypes.MessageAttributeValue{}
		}
		if a.sent[url] == nil {
			a.sent[url] = map[string][]map[string]sqstypes.MessageAttributeValue{}
		}
		a.sent[url][body] = append(a.sent[url][body], in.MessageAttributes)
	}
	return out, err
}

func (a *attributed) attributes(url, body string) []map[string]sqstypes.MessageAttributeValue {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sent[url][body]
}

// TestPoisonGoesToDeadLetter: malformed messages move to the dead-letter queue with the reason,
// and the claimer goes on to claim a good instance.
func TestPoisonGoesToDeadLetter(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	poison := []string{"not json", `{"v":1,"pool":"` + w.pool + `"}`, `{"v":9}`}
	for _, body := range poison {
		w.send(body)
	}
	good := w.idle(spotC7)
	client := &attributed{SQS: w.SQS}
	q, err := offers.NewQueue(client, w.pool, w.Doc.QueueURL, w.Doc.DeadLetterQueueURL)
	require.NoError(t, err)
	sel := &offers.Selector{Queue: q, Store: w.Store}

	res, err := sel.Claim(w.ctx, request("17", 1))
	require.NoError(t, err)
	require.Len(t, res.Instances, 1)
	require.Equal(t, good.ID, res.Instances[0].ID)
	if res.Stats.Poison < 3 { // the good one may come first; a second claim meets the rest
		res2, err := sel.Claim(w.ctx, request("18", 1))
		require.NoError(t, err)
		require.Empty(t, res2.Instances)
		res.Stats.Poison += res2.Stats.Poison
	}
	require.Equal(t, 3, res.Stats.Poison)
	require.Empty(t, w.SQS.Bodies(w.Doc.QueueURL), "nothing is left in the pool's queue")
	require.ElementsMatch(t, poison, w.SQS.Bodies(w.Doc.DeadLetterQueueURL), "each moved to the dead-letter queue once")
	for _, body := range poison {
		attrs := client.attributes(w.Doc.DeadLetterQueueURL, body)
		require.Len(t, attrs, 1, body)
		require.Contains(t, aws.ToString(attrs[0]["hangar-reason"].StringValue), "poison pool message", body)
		require.Equal(t, w.pool, aws.ToString(attrs[0]["hangar-pool"].StringValue), body)
	}
}

// TestClaimGiven: an offer the caller holds in hand (on no queue) is claimed first, with no
// receive and nothing to delete; one that does not fit, or is stale, is not claimed and is left
// to the caller; the rest of the request comes from the queue.
func TestClaimGiven(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	given := w.idleIn(w.pool, spotC7, false)
	msg, err := offers.MessageFor(given)
	require.NoError(t, err)

	res, err := w.selector().Claim(w.ctx, offersWith(request("21", 1), msg))
	require.NoError(t, err)
	require.Len(t, res.Instances, 1)
	require.Equal(t, given.ID, res.Instances[0].ID)
	require.Equal(t, state.Claimed, w.Store.Item(given.ID).State)
	require.Equal(t, "21", w.Store.Item(given.ID).RunID)
	require.Equal(t, offers.Stats{Claimed: 1}, res.Stats, "no receive")
	require.Zero(t, w.SQS.Calls("ReceiveMessage")+w.SQS.Calls("DeleteMessageBatch")+w.SQS.Calls("ChangeMessageVisibilityBatch"))

	// Given again, now claimed: stale, and the one offered on the queue serves instead.
	queued := w.idle(spotC7)
	res, err = w.selector().Claim(w.ctx, offersWith(request("22", 1), msg))
	require.NoError(t, err)
	require.Len(t, res.Instances, 1)
	require.Equal(t, queued.ID, res.Instances[0].ID)
	require.Equal(t, "21", w.Store.Item(given.ID).RunID, "the stale given offer claims nothing")

	// Given, but of a type the request does not fit: not claimed, and not offered either.
	other := w.idleIn(w.pool, state.Spec{InstanceType: "m7g.large", UsageClass: state.UsageSpot, VCPU: 2, MemoryMiB: 8192}, false)
	m2, err := offers.MessageFor(other)
	require.NoError(t, err)
	req := offersWith(request("23", 1), m2)
	req.InstanceTypes = []string{"c7i.*"}
	res, err = w.selector().Claim(w.ctx, req)
	require.NoError(t, err)
	require.Empty(t, res.Instances)
	require.Equal(t, state.Idle, w.Store.Item(other.ID).State)
	require.Empty(t, w.offered())

	// A given offer of another pool is refused before anything is received.
	m2.Pool = "other"
	_, err = w.selector().Claim(w.ctx, offersWith(request("24", 1), m2))
	require.ErrorContains(t, err, "the offer given of "+other.ID)
}

func offersWith(r offers.Request, given ...offers.Message) offers.Request {
	r.Given = given
	return r
}
