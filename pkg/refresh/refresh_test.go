package refresh_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
	"github.com/hangar-ci/hangar/pkg/refresh"
	"github.com/hangar-ci/hangar/pkg/refresh/spend"
)

// TestExpiryInEveryState: an instance past its deadline in any live state is terminated, item
// and machine, and its offer goes; one within its deadline is left alone.
func TestExpiryInEveryState(t *testing.T) {
	t.Parallel()
	r := newRig(t, warm(2, 0)) // the live instances below are the two wanted, whether or not the fresh one's agent is ready yet
	past := time.Now().Add(-time.Second)
	expired := map[state.State]string{
		state.Created: r.addWarming(past).ID,
		state.Idle:    r.AddIdle(t, fake.Idle{Served: []string{"octo/app"}, LastRun: "6099", Deadline: past}).ID,
		state.Stopped: r.AddIdle(t, fake.Idle{Stopped: true, Deadline: past}).ID,
		state.Claimed: r.expire(r.AddHeld(t, fake.Held{Run: "6101", Claimed: true})).ID,
		state.Running: r.expire(r.AddHeld(t, fake.Held{Run: "6100"})).ID,
	}
	for st, id := range expired {
		require.Equal(t, st, r.Store.Item(id).State)
	}
	fresh := r.addWarming(time.Now().Add(time.Hour))
	live := r.AddIdle(t, fake.Idle{Served: []string{"octo/app"}, LastRun: "6102"})

	rep := r.refresh(refresh.Config{})
	require.Equal(t, 5, rep.Pools[0].Expired)
	require.Zero(t, rep.Pools[0].Launched, "the live instances are the ones the schedule wants")
	for st, id := range expired {
		it := r.Store.Item(id)
		require.Equal(t, state.Terminated, it.State, "expired in %s", st)
		require.Contains(t, it.StateReason, "expired in "+string(st))
		require.Equal(t, ec2types.InstanceStateNameTerminated, r.EC2.State(id), "expired in %s", st)
	}
	it := r.Store.Item(fresh.ID)
	require.Contains(t, []state.State{state.Created, state.Idle}, it.State,
		"an instance within its deadline stays (warming, or promoted if its agent is ready): %q", it.StateReason)
	require.Equal(t, ec2types.InstanceStateNameRunning, r.EC2.State(fresh.ID))
	require.Equal(t, state.Idle, r.Store.Item(live.ID).State, "within its deadline: kept")
	require.Equal(t, live.Version, r.Store.Item(live.ID).Version)
	require.Equal(t, ec2types.InstanceStateNameRunning, r.EC2.State(live.ID))
	offered := r.Offered(t)
	require.Contains(t, offered, live.ID)
	for _, id := range offered {
		require.Contains(t, []string{live.ID, fresh.ID}, id, "the expired instances' offers are tidied away")
	}
	require.Contains(t, r.metrics.String(), `"CloudWatchMetrics"`, "metrics in embedded metric format")
	require.Contains(t, r.metrics.String(), `"Expired":5`)
}

// TestOrphansAndGhosts: a launched instance that never got an item is terminated once past the
// grace; one whose item exists only loses the tag; an item whose instance is gone is marked
// terminated.
func TestOrphansAndGhosts(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	tags := fleet.ForWarmPool(fake.Stack, r.deployed.Name)
	tags[fleet.TagUnrecorded] = "true"
	orphan, young := "i-0000000000000a001", "i-0000000000000a002"
	r.EC2.Launch(orphan, "c7i.large", tags, time.Now().Add(-time.Hour))
	r.EC2.Launch(young, "c7i.large", tags, time.Now())                                // provision may be recording it right now
	recorded := r.AddIdle(t, fake.Idle{Served: []string{"octo/app"}, LastRun: "100"}) // served a run: no trim
	r.EC2.Launch(recorded.ID, "c7i.large", tags, time.Now().Add(-time.Hour))          // its untagging failed
	ghost := r.addGhost(time.Now().Add(time.Hour))                                    // its instance is gone

	rep := r.refresh(refresh.Config{})
	require.Equal(t, 1, rep.Orphans)
	require.Equal(t, ec2types.InstanceStateNameTerminated, r.EC2.State(orphan))
	require.Equal(t, ec2types.InstanceStateNameRunning, r.EC2.State(young), "within the grace: left alone")
	require.Equal(t, ec2types.InstanceStateNameRunning, r.EC2.State(recorded.ID), "an instance with an item is no orphan")
	require.NotContains(t, r.EC2.Tags(recorded.ID), fleet.TagUnrecorded, "recorded: the leftover tag is removed")
	require.Equal(t, state.Idle, r.Store.Item(recorded.ID).State)
	it := r.Store.Item(ghost.ID)
	require.Equal(t, state.Terminated, it.State)
	require.Contains(t, it.StateReason, "missing on EC2")
	require.Contains(t, rep.Actions, refresh.Action{Instance: orphan, Pool: r.deployed.Name, Do: "terminate",
		Reason: "orphan: launched more than 5m0s ago and never recorded"})
	require.Contains(t, rep.Actions, refresh.Action{Instance: recorded.ID, Pool: r.deployed.Name, Do: "untag",
		Reason: "it has an item; the tag was left behind"})
}

// TestWarmPool: filled from empty, topped up after a claim, shrunk when the schedule shrinks,
// rolled when the spec changes.
func TestWarmPool(t *testing.T) {
	t.Parallel()
	r := newRig(t, warm(2, 0))

	rep := r.refresh(refresh.Config{})
	require.Equal(t, 2, rep.Pools[0].Launched, "filled from empty…")
	require.Equal(t, 1, r.EC2.Calls("CreateFleet"), "…in one request")
	warming := r.inState(state.Created)
	require.Len(t, warming, 2)
	for _, in := range warming {
		require.Empty(t, in.RunID, "a warm instance serves no run yet")
		require.Equal(t, "true", r.EC2.Tags(in.ID)[fleet.TagWarm])
		require.NotContains(t, r.EC2.Tags(in.ID), fleet.TagUnrecorded, "recorded")
	}
	r.waitReady()
	rep = r.refresh(refresh.Config{})
	require.Equal(t, 2, rep.Pools[0].Idle, "READY warm instances join the pool")
	require.Zero(t, rep.Pools[0].Launched)
	first := ids(r.inState(state.Idle))
	require.Equal(t, ids(warming), first)
	require.ElementsMatch(t, first, r.Offered(t), "offered once promoted, once each")

	res := r.provision("6201", 1)
	require.Equal(t, 1, res.Reused, "a warm instance is claimed")
	rep = r.refresh(refresh.Config{})
	require.Equal(t, 1, rep.Pools[0].Launched, "topped up after the claim")
	r.waitReady()
	r.refresh(refresh.Config{})
	require.Len(t, r.inState(state.Idle), 2)

	r.schedule(0, 0)
	rep = r.refresh(refresh.Config{})
	require.Empty(t, r.inState(state.Idle), "shrunk: warm instances that never served a run go")
	left := 0
	for _, id := range first {
		if r.Store.Item(id).State != state.Terminated {
			left++
		}
	}
	require.Equal(t, 1, left, "of the first two warm instances only the claimed one remains")
	running := r.inState(state.Running)
	require.Len(t, running, 1, "the claimed instance is never touched")
	require.Equal(t, "6201", running[0].RunID)
	require.Equal(t, ec2types.InstanceStateNameRunning, r.EC2.State(running[0].ID))
	for _, a := range rep.Actions {
		require.NotEqual(t, running[0].ID, a.Instance)
	}
	require.Empty(t, r.Offered(t))

	r.schedule(1, 0)
	r.refresh(refresh.Config{})
	r.waitReady()
	r.refresh(refresh.Config{})
	old := ids(r.inState(state.Idle))
	require.Len(t, old, 1)
	r.update(func(doc map[string]any) { doc["specHash"] = "spec2" })
	rep = r.refresh(refresh.Config{})
	require.Equal(t, 1, rep.Pools[0].Launched, "rolled: the outdated instance is replaced")
	it := r.Store.Item(old[0])
	require.Equal(t, state.Terminated, it.State)
	require.Contains(t, it.StateReason, "outdated spec spec1")
	for _, in := range r.inState(state.Created) {
		require.Equal(t, "spec2", in.SpecHash, "its replacement has the new spec")
	}
}

// TestStoppedWarmInstanceClaimed: the stopped part of a warm pool is stopped on EC2; provision
// claims a stopped instance, starts it and gets its runner.
func TestStoppedWarmInstanceClaimed(t *testing.T) {
	t.Parallel()
	r := newRig(t, warm(0, 1))
	r.refresh(refresh.Config{})
	r.waitReady()
	rep := r.refresh(refresh.Config{})
	require.Equal(t, 1, rep.Pools[0].Stops)
	stopped := r.inState(state.Stopped)
	require.Len(t, stopped, 1)
	require.Equal(t, ec2types.InstanceStateNameStopped, r.EC2.State(stopped[0].ID))
	require.Equal(t, []string{stopped[0].ID}, r.Offered(t), "offered as stopped")

	res := r.provision("6301", 1)
	require.Equal(t, 1, res.Reused)
	require.Equal(t, stopped[0].ID, res.Instances[0].ID, "the stopped instance is claimed and started")
	require.Equal(t, ec2types.InstanceStateNameRunning, r.EC2.State(stopped[0].ID))
	it := r.Store.Item(stopped[0].ID)
	require.Equal(t, state.Running, it.State, "its runner registered")
	require.Equal(t, "6301", it.RunID)
}

// leaseAfter is the store with each take of a pool's launch lease held until before returns.
type leaseAfter struct {
	*fake.Store
	before func()
}

func (s leaseAfter) Lease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	if strings.HasPrefix(name, "launch/") {
		s.before()
	}
	return s.Store.Lease(ctx, name, holder, ttl)
}

// TestConcurrentRefreshes: two refreshes at once terminate each expired instance once and fill a
// deficit once, even when the second reads the pool before the first fills it and takes the
// launch lease only once the first has given it up (and the first's instances are ready).
func TestConcurrentRefreshes(t *testing.T) {
	t.Parallel()
	r := newRig(t, warm(2, 0))
	var expired []string
	for range 3 {
		expired = append(expired, r.addWarming(time.Now().Add(-time.Second)).ID)
	}
	secondRead, firstDone := make(chan struct{}), make(chan struct{})
	first, second := r.deps(), r.deps()
	first.Store = leaseAfter{Store: r.Store, before: func() {
		select {
		case <-secondRead:
		case <-time.After(time.Minute):
			t.Error("the second refresh never came to the launch lease")
		}
	}}
	second.Store = leaseAfter{Store: r.Store, before: func() {
		close(secondRead)
		<-firstDone
		if err := r.ready(); err != nil {
			t.Errorf("the first refresh's instances never got ready: %v", err)
		}
	}}
	var wg sync.WaitGroup
	reports := make([]*refresh.Report, 2)
	wg.Go(func() {
		defer close(firstDone)
		reports[0] = r.run(refresh.Config{}, first)
	})
	wg.Go(func() { reports[1] = r.run(refresh.Config{}, second) })
	wg.Wait()
	for _, rep := range reports {
		require.Empty(t, rep.Errors)
	}
	require.Equal(t, 3, reports[0].Pools[0].Expired+reports[1].Pools[0].Expired, "each expired instance terminated once")
	require.Equal(t, 2, reports[0].Pools[0].Launched+reports[1].Pools[0].Launched, "the deficit filled once")
	require.Len(t, append(r.inState(state.Created), r.inState(state.Idle)...), 2, "warming, or promoted if ready")
	require.Equal(t, 1, r.EC2.Calls("CreateFleet"))
	for _, id := range expired {
		require.Equal(t, state.Terminated, r.Store.Item(id).State)
	}
}

// TestDryRun changes nothing and says what it would do: terminate what expired, promote what is
// ready (counted idle, not warming again) and launch what is missing.
func TestDryRun(t *testing.T) {
	t.Parallel()
	r := newRig(t, warm(2, 0))
	id := r.addWarming(time.Now().Add(-time.Second)).ID
	ready := r.addWarming(time.Now().Add(time.Hour)).ID
	r.waitReady()
	rep := r.refresh(refresh.Config{DryRun: true})
	require.True(t, rep.DryRun)
	var did []string
	for _, a := range rep.Actions {
		did = append(did, a.Do+" "+a.Instance)
	}
	require.Contains(t, did, "terminate "+id)
	require.Contains(t, did, "promote "+ready)
	require.Contains(t, rep.Actions, refresh.Action{Pool: r.deployed.Name, Do: "launch", Reason: "1 warm instances missing"})
	require.Equal(t, 1, rep.Pools[0].Expired)
	require.Equal(t, 1, rep.Pools[0].Launched, "what it would launch")
	require.Equal(t, state.Created, r.Store.Item(id).State, "dry: nothing changed")
	require.Equal(t, state.Created, r.Store.Item(ready).State)
	require.Len(t, r.inState(state.Created), 2)
	require.Equal(t, ec2types.InstanceStateNameRunning, r.EC2.State(id))
	require.Zero(t, r.EC2.Calls("CreateFleet")+r.EC2.Calls("TerminateInstances"), "nothing asked of EC2")
	require.Empty(t, r.Offered(t))
}

// TestSpotInterruption: a spot interruption warning marks the instance terminated at once; its
// pool offer goes stale.
func TestSpotInterruption(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	in := r.AddIdle(t, fake.Idle{})
	act, err := refresh.Interrupted(r.ctx, r.deps(), in.ID)
	require.NoError(t, err)
	require.Equal(t, ec2types.InstanceStateNameRunning, r.EC2.State(in.ID), "the warning only marks the item: EC2 reclaims the machine itself")
	require.Equal(t, &refresh.Action{Instance: in.ID, Pool: r.deployed.Name, Do: "terminate", Reason: "spot interruption warning"}, act)
	it := r.Store.Item(in.ID)
	require.Equal(t, state.Terminated, it.State)
	require.Equal(t, "spot interruption warning", it.StateReason)
	res, err := r.Selector(t).Claim(r.ctx, offers.Request{Count: 1, Assign: state.Assignment{RunID: "6400", Repo: "octo/app"},
		ClaimDeadline: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	require.Empty(t, res.Instances, "its offer is stale: no claim takes it")
	act, err = refresh.Interrupted(r.ctx, r.deps(), "i-0123456789abcdef9")
	require.NoError(t, err)
	require.Nil(t, act, "an instance Hangar does not know is ignored")
}

// TestExpiryLosingToAClaimTerminatesNothing: an idle instance past its deadline is claimed by a
// run between refresh's read and its write; the write loses and the instance lives on, claimed.
func TestExpiryLosingToAClaimTerminatesNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	in := r.AddIdle(t, fake.Idle{Deadline: time.Now().Add(-time.Second)})
	r.Store.StealBefore(in.ID, "6300", state.Terminated)

	rep := r.refresh(refresh.Config{})
	require.True(t, r.Store.Stolen(in.ID), "the claim landed between refresh's read and its write")
	require.Zero(t, rep.Pools[0].Expired, "refresh ended nothing it did not win")
	it := r.Store.Item(in.ID)
	require.Equal(t, state.Claimed, it.State)
	require.Equal(t, "6300", it.RunID)
	require.Equal(t, ec2types.InstanceStateNameRunning, r.EC2.State(in.ID), "the claimed instance keeps running: a lost write never reaches EC2")
	require.Zero(t, r.EC2.Calls("TerminateInstances"))
}

// TestRefreshTidiesOffers: a refresh deletes the offer a claimer killed before its delete left
// behind (the instance is claimed now) and offers again an idle instance whose offer was lost,
// so that afterwards the pool offers exactly its idle instances, once each.
func TestRefreshTidiesOffers(t *testing.T) {
	t.Parallel()
	r := newRig(t, warm(2, 0))
	taken, kept := r.AddIdle(t, fake.Idle{}), r.AddIdle(t, fake.Idle{})

	// The claim of a provision killed before it deleted the message: the offer stays, stale.
	_, err := r.Store.Transition(r.ctx, state.Change{InstanceID: taken.ID, Pool: r.deployed.Name, From: state.Idle, To: state.Claimed,
		Version: taken.Version, Assign: &state.Assignment{RunID: "6401", Repo: "octo/app"}, Threshold: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	// The other's offer is gone, as if a release had died between its write and its publish.
	out, err := r.SQS.ReceiveMessage(r.ctx, &sqs.ReceiveMessageInput{QueueUrl: &r.deployed.QueueURL, MaxNumberOfMessages: 10, VisibilityTimeout: 60})
	require.NoError(t, err)
	require.Len(t, out.Messages, 2)
	for _, m := range out.Messages {
		msg, err := offers.ParseMessage(aws.ToString(m.Body), r.deployed.Name)
		require.NoError(t, err)
		if msg.InstanceID == kept.ID {
			_, err = r.SQS.DeleteMessageBatch(r.ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &r.deployed.QueueURL,
				Entries: []sqstypes.DeleteMessageBatchRequestEntry{{Id: aws.String("0"), ReceiptHandle: m.ReceiptHandle}}})
		} else {
			_, err = r.SQS.ChangeMessageVisibilityBatch(r.ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &r.deployed.QueueURL,
				Entries: []sqstypes.ChangeMessageVisibilityBatchRequestEntry{{Id: aws.String("0"), ReceiptHandle: m.ReceiptHandle}}})
		}
		require.NoError(t, err)
	}
	require.Equal(t, []string{taken.ID}, r.Offered(t))

	rep := r.refresh(refresh.Config{})
	require.Equal(t, 1, rep.Pools[0].OffersDropped, "the claimed instance's stale offer")
	require.Equal(t, 1, rep.Pools[0].Reoffered, "the idle instance without an offer")
	require.Equal(t, 1, rep.Pools[0].Depth)
	require.Equal(t, []string{kept.ID}, r.Offered(t))
}

// TestRefreshPublishesWhatRunsCost: a refresh publishes the cost of the runs that ended, per
// pool and repository, once: a dry run publishes nothing, and the next refresh nothing again.
func TestRefreshPublishesWhatRunsCost(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	pub, err := spend.New(r.Store, &r.metrics, spend.Config{Stack: fake.Stack})
	require.NoError(t, err)
	r.spend = pub
	// A run that ended five minutes ago (past the publisher's lag), on a priced instance.
	end := time.Now().Add(-5 * time.Minute)
	r.Store.PutRunRecord(state.RunRecord{Key: "run#990#1#i-0c05700000000000a", Run: "990", RunAttempt: 1, Repo: "octo/app",
		InstanceID: "i-0c05700000000000a", Pool: r.deployed.Name, Claimed: true, AssignedAt: end.Add(-10 * time.Minute), EndedAt: end,
		Outcome: string(state.Idle), Reason: "released by run 990",
		Spec: state.Spec{InstanceType: "c7i.large", UsageClass: state.UsageOnDemand, Price: 0.0893, PriceSource: state.PriceOnDemand}})

	costLines := func() []map[string]any {
		var out []map[string]any
		for _, l := range strings.Split(r.metrics.String(), "\n") {
			if !strings.Contains(l, `"RunCostUSD"`) {
				continue
			}
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(l), &m), l)
			out = append(out, m)
		}
		return out
	}
	r.refresh(refresh.Config{DryRun: true})
	require.Empty(t, costLines(), "a dry run publishes nothing")
	r.refresh(refresh.Config{})
	lines := costLines()
	require.Len(t, lines, 1, r.metrics.String())
	require.Equal(t, r.deployed.Name, lines[0]["Pool"])
	require.Equal(t, "octo/app", lines[0]["Repository"])
	require.Equal(t, fake.Stack, lines[0]["Stack"])
	require.Greater(t, lines[0]["RunCostUSD"].(float64), 0.0)
	require.InDelta(t, 600.0, lines[0]["RunInstanceSeconds"].(float64), 1e-6, "assigned ten minutes before it ended")
	require.InDelta(t, lines[0]["RunInstanceSeconds"].(float64)*0.0893/3600, lines[0]["RunCostUSD"].(float64), 1e-12, "seconds × the launch price")
	r.refresh(refresh.Config{})
	require.Len(t, costLines(), 1, "published once")
}

// TestDrainedPoolKeepsNothingWarm: a drained pool whose schedule wants instances hot gets none:
// refresh launches nothing and retires the idle ones, whose offers it deletes.
func TestDrainedPoolKeepsNothingWarm(t *testing.T) {
	t.Parallel()
	r := newRig(t, warm(2, 0), func(doc map[string]any) { doc["drained"] = true })
	idle := r.AddIdle(t, fake.Idle{})
	served := r.AddIdle(t, fake.Idle{Served: []string{"octo/app"}, LastRun: "100"}) // slipped past the drain's mark
	stopped := r.AddIdle(t, fake.Idle{Stopped: true, Served: []string{"octo/app"}, LastRun: "101"})

	rep := r.refresh(refresh.Config{})
	require.Zero(t, rep.Pools[0].Launched, "nothing is kept warm")
	require.Equal(t, pooldoc.Target{Schedule: "drained"}, rep.Pools[0].Target)
	require.Equal(t, state.Terminated, r.Store.Item(idle.ID).State)
	for _, in := range []*state.Instance{served, stopped} {
		it := r.Store.Item(in.ID)
		require.Equal(t, state.Terminated, it.State, "one that served a run is ended too, not left to its idle deadline")
		require.Equal(t, pooldoc.DrainedReason, it.StateReason)
	}
	require.Empty(t, r.Offered(t), "nothing of a drained pool is offered")
}
