package offers_test

import (
	"fmt"
	"sync"
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

// TestClaimOne: a published idle instance is claimed for the run, and its message is gone.
func TestClaimOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in := e.idle(spotC7)
	ctx := testbed.Context(t, 30*time.Second)

	res, err := e.selector().Claim(ctx, request("11", 1))
	require.NoError(t, err)
	require.Len(t, res.Instances, 1)
	got := res.Instances[0]
	require.Equal(t, in.ID, got.ID)
	require.Equal(t, state.Claimed, got.State)
	require.Equal(t, "11", got.RunID)
	require.Equal(t, "octo/app", got.Repo)
	require.Equal(t, offers.Stats{Receives: 1, Received: 1, Claimed: 1}, res.Stats)
	require.Empty(t, e.offered(), "the used message is deleted")
}

// TestClaimFromEmptyPool: a pool with nothing offered answers at once, without a long poll: one
// receive that does not wait and one read of the queue's counts. An offer made right after is
// not swallowed by anything that claim left behind: it is visible at once, nothing is in flight,
// and the next claim takes it with a single receive.
func TestClaimFromEmptyPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testbed.Context(t, 30*time.Second)
	sel := e.selector()
	sel.Wait = 20 * time.Second // were it to long-poll an empty pool, the claim would take 20 s
	res, err := sel.Claim(ctx, request("12", 3))
	require.NoError(t, err)
	require.Empty(t, res.Instances)
	require.Equal(t, offers.Stats{Receives: 1, Counts: 1}, res.Stats, "no long poll")

	in := e.idle(spotC7)
	out, err := e.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &e.url,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	require.NoError(t, err)
	require.Equal(t, "1", out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)], "the offer is visible")
	require.Equal(t, "0", out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)], "nothing holds it")

	res, err = sel.Claim(ctx, request("13", 1))
	require.NoError(t, err)
	require.Len(t, res.Instances, 1)
	require.Equal(t, in.ID, res.Instances[0].ID)
	require.Equal(t, offers.Stats{Receives: 1, Received: 1, Claimed: 1}, res.Stats)
}

// TestClaimFilters: only fitting instances are claimed; the rest stay offered, once each.
func TestClaimFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testbed.Context(t, time.Minute)
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
			in := e.idle(sp)
			if i == 1 { // spot, c*, >= 4 vCPU, >= 8 GiB
				want[in.ID] = true
			} else {
				others = append(others, in.ID)
			}
		}
	}
	req := request("13", 3)
	req.UsageClass, req.InstanceTypes, req.MinVCPU, req.MinMemoryMiB = state.UsageSpot, []string{"c*", "t*"}, 4, 8192
	res, err := e.selector().Claim(ctx, req)
	require.NoError(t, err)
	require.Len(t, res.Instances, 3)
	for _, in := range res.Instances {
		require.True(t, want[in.ID], "%s (%s) does not fit", in.ID, in.InstanceType)
	}
	offered := e.offered()
	require.Len(t, offered, len(others))
	for _, id := range others {
		require.Equal(t, 1, offered[id], "%s offered once", id)
	}
}

// TestStaleMessagesDropped: a message superseded by a newer offer of the same instance, one past
// its deadline, and one whose instance was claimed elsewhere are all deleted, never used.
func TestStaleMessagesDropped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testbed.Context(t, time.Minute)

	// Offered, then stopped and offered again: the first message is superseded.
	reoffered := e.idle(spotC7)
	stopped, err := e.store.Transition(ctx, state.Change{InstanceID: reoffered.ID, Pool: poolName, From: state.Idle, To: state.Stopped,
		Version: reoffered.Version, Threshold: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.NoError(t, e.queue.Publish(ctx, stopped))

	// Offered, then claimed directly by someone holding the message elsewhere (simulated by a
	// direct claim): its message is stale.
	taken := e.idle(spotC7)
	_, err = e.store.Transition(ctx, state.Change{InstanceID: taken.ID, Pool: poolName, From: state.Idle, To: state.Claimed,
		Version: taken.Version, Assign: &state.Assignment{RunID: "99", Repo: "octo/app"}, Threshold: time.Now().Add(time.Hour)})
	require.NoError(t, err)

	// Offered with a deadline in the past.
	expired := &state.Instance{ID: newID(), Pool: poolName, Threshold: time.Now().Add(time.Minute), Spec: spotC7}
	require.NoError(t, e.store.Create(ctx, []*state.Instance{expired}))
	exp, err := e.store.Transition(ctx, state.Change{InstanceID: expired.ID, Pool: poolName, From: state.Created, To: state.Idle,
		Version: 1, Threshold: time.Now().Add(-time.Second)})
	require.NoError(t, err)
	require.NoError(t, e.queue.Publish(ctx, exp))

	res, err := e.selector().Claim(ctx, request("14", 3))
	require.NoError(t, err)
	require.Len(t, res.Instances, 1, "only the re-offered (stopped) instance is claimable")
	require.Equal(t, reoffered.ID, res.Instances[0].ID)
	require.Equal(t, int64(4), res.Instances[0].Version, "claimed through the newer offer")
	require.Equal(t, 1, res.Stats.Claimed)
	require.Equal(t, 3, res.Stats.Lost+res.Stats.Stale, "superseded, taken and expired messages dropped")
	require.Empty(t, e.offered(), "nothing stale remains")

	got, err := e.store.Get(ctx, exp.ID)
	require.NoError(t, err)
	require.Equal(t, state.Idle, got.State, "an expired offer is left for refresh to terminate")
}

// TestHotBeforeStopped: running instances are claimed first; stopped ones only to make up the
// count.
func TestHotBeforeStopped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testbed.Context(t, time.Minute)
	var stoppedIDs []string
	idle := []*state.Instance{e.idle(spotC7), e.idle(spotC7), e.idle(spotC7)}
	drain(t, e.sqs, e.url) // hide the idle offers; stopped ones replace them
	for _, in := range idle {
		st, err := e.store.Transition(ctx, state.Change{InstanceID: in.ID, Pool: poolName, From: state.Idle, To: state.Stopped,
			Version: in.Version, Threshold: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		require.NoError(t, e.queue.Publish(ctx, st))
		stoppedIDs = append(stoppedIDs, in.ID)
	}
	hot := e.idle(spotC7)

	res, err := e.selector().Claim(ctx, request("15", 2))
	require.NoError(t, err)
	require.Len(t, res.Instances, 2)
	require.Equal(t, hot.ID, res.Instances[0].ID, "the hot instance first")
	require.Contains(t, stoppedIDs, res.Instances[1].ID)
	require.Equal(t, state.Claimed, res.Instances[1].State)
	require.Equal(t, []string{res.Instances[1].ID}, res.Stopped, "the caller learns which to start")

	res, err = e.selector().Claim(ctx, request("16", 1))
	require.NoError(t, err)
	require.Len(t, res.Instances, 1)
	require.Contains(t, stoppedIDs, res.Instances[0].ID)
}

// TestPoisonGoesToDeadLetter: malformed messages move to the dead-letter queue with the reason,
// and the claimer goes on to claim a good instance.
func TestPoisonGoesToDeadLetter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testbed.Context(t, time.Minute)
	for _, body := range []string{"not json", `{"v":1,"pool":"linux-x64"}`, `{"v":9}`} {
		_, err := e.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &e.url, MessageBody: aws.String(body)})
		require.NoError(t, err)
	}
	good := e.idle(spotC7)

	res, err := e.selector().Claim(ctx, request("17", 1))
	require.NoError(t, err)
	require.Len(t, res.Instances, 1)
	require.Equal(t, good.ID, res.Instances[0].ID)
	if res.Stats.Poison < 3 { // the good one may come first; a second claim meets the rest
		res2, err := e.selector().Claim(ctx, request("18", 1))
		require.NoError(t, err)
		require.Empty(t, res2.Instances)
		res.Stats.Poison += res2.Stats.Poison
	}
	require.Equal(t, 3, res.Stats.Poison)
	require.Empty(t, e.offered())
	dead := drain(t, e.sqs, e.dlqURL)
	require.Len(t, dead, 3)
	for _, m := range dead {
		require.Contains(t, aws.ToString(m.MessageAttributes["hangar-reason"].StringValue), "poison pool message")
	}
}

// TestConcurrentClaimsRace: 50 claimers asking for 1–3 instances each race over 20 idle instances,
// 20 rounds. No instance is claimed twice; every instance ends claimed exactly once (by the
// claimer that was told so) or still idle, unchanged and offered exactly once.
func TestConcurrentClaimsRace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const rounds, instances, claimers = 20, 20, 50
	for round := range rounds {
		ctx := testbed.Context(t, 2*time.Minute)
		url, dlq := createQueues(t, e.sqs, testbed.Name(t, fmt.Sprintf("race-%d", round)))
		q, err := offers.NewQueue(e.sqs, poolName, url, dlq)
		require.NoError(t, err)
		idle := map[string]*state.Instance{}
		for range instances {
			in := &state.Instance{ID: newID(), Pool: poolName, Threshold: time.Now().Add(10 * time.Minute), Spec: spotC7}
			require.NoError(t, e.store.Create(ctx, []*state.Instance{in}))
			out, err := e.store.Transition(ctx, state.Change{InstanceID: in.ID, Pool: poolName, From: state.Created, To: state.Idle,
				Version: 1, Threshold: time.Now().Add(30 * time.Minute)})
			require.NoError(t, err)
			idle[out.ID] = out
		}
		all := make([]*state.Instance, 0, instances)
		for _, in := range idle {
			all = append(all, in)
		}
		require.NoError(t, q.Publish(ctx, all...))

		sel := &offers.Selector{Queue: q, Store: e.store}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			claimer = map[string]string{} // instance → run that was told it won
			errs    []error
		)
		for c := range claimers {
			run := fmt.Sprintf("%d%03d", round+1, c)
			wg.Go(func() {
				res, err := sel.Claim(ctx, request(run, 1+c%3))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, in := range res.Instances {
					if prev, dup := claimer[in.ID]; dup {
						errs = append(errs, fmt.Errorf("round %d: %s claimed by runs %s and %s", round, in.ID, prev, run))
					}
					claimer[in.ID] = run
				}
			})
		}
		wg.Wait()
		require.Empty(t, errs)
		require.NotEmpty(t, claimer, "round %d: nothing claimed", round)

		ids := make([]string, 0, instances)
		var unclaimed []string
		for id := range idle {
			ids = append(ids, id)
			if _, ok := claimer[id]; !ok {
				unclaimed = append(unclaimed, id)
			}
		}
		// Every unclaimed instance must come back on offer: at once when every receive's
		// response arrived, after the visibility timeout when one was lost on the way.
		offered := offersUntil(t, e.sqs, url, unclaimed, offers.DefaultVisibility+15*time.Second)
		items, err := e.store.GetMany(ctx, ids)
		require.NoError(t, err)
		for id, before := range idle {
			got := items[id]
			if run, ok := claimer[id]; ok {
				require.Equal(t, state.Claimed, got.State, "round %d: %s", round, id)
				require.Equal(t, run, got.RunID, "round %d: %s held by the run told it won", round, id)
				require.Equal(t, before.Version+1, got.Version)
				require.Zero(t, offered[id], "round %d: claimed %s still offered", round, id)
			} else {
				require.Equal(t, before, got, "round %d: unclaimed %s unchanged", round, id)
				require.Equal(t, 1, offered[id], "round %d: unclaimed %s offered exactly once", round, id)
			}
		}
		require.Len(t, offered, instances-len(claimer), "round %d: no message for an unknown instance", round)
	}
}
