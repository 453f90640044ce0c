package refresh_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
	"github.com/hangar-ci/hangar/pkg/refresh"
)

// TestExpiryInEveryState: an instance past its deadline in any live state is terminated, item
// and machine; one within its deadline is left alone.
func TestExpiryInEveryState(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.schedule(1, 0) // the fresh warm instance below is wanted, whether or not its agent is ready yet
	past := time.Now().Add(-time.Second)
	expired := map[state.State]string{}
	for _, st := range state.LiveStates {
		id, err := e.Launch(e.ctx, time.Time{})
		require.NoError(t, err)
		in, err := e.Warm(e.ctx, id) // idle
		require.NoError(t, err)
		switch st {
		case state.Created:
			id, err = e.Launch(e.ctx, past)
			require.NoError(t, err)
		case state.Idle:
			_, err = e.Transition(e.ctx, state.Change{InstanceID: id, From: state.Idle, To: state.Stopped, Version: in.Version})
			require.NoError(t, err)
			in, err = e.Store.Get(e.ctx, id)
			require.NoError(t, err)
			_, err = e.Transition(e.ctx, state.Change{InstanceID: id, From: state.Stopped, To: state.Idle, Version: in.Version, Threshold: past})
		case state.Stopped:
			_, err = e.Transition(e.ctx, state.Change{InstanceID: id, From: state.Idle, To: state.Stopped, Version: in.Version, Threshold: past})
		case state.Claimed, state.Running:
			in, err = e.Claim(e.ctx, in, "6100")
			require.NoError(t, err)
			if st == state.Running {
				in, err = e.WaitSignal(e.ctx, id, state.SignalRegistered, "6100", in.Version)
				require.NoError(t, err)
				_, err = e.Transition(e.ctx, state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: in.Version, RunID: "6100", Threshold: past})
			} else {
				_, err = e.Transition(e.ctx, state.Change{InstanceID: id, From: state.Claimed, To: state.Idle, Version: in.Version, RunID: "6100"})
				require.NoError(t, err)
				in, err = e.Store.Get(e.ctx, id)
				require.NoError(t, err)
				_, err = e.Store.Transition(e.ctx, state.Change{InstanceID: id, Pool: e.Pool, From: state.Idle, To: state.Claimed, Version: in.Version,
					Assign: &state.Assignment{RunID: "6101", Repo: "octo/app"}, Threshold: past})
			}
		}
		require.NoError(t, err)
		expired[st] = id
	}
	fresh, err := e.Launch(e.ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)

	rep := e.refresh(refresh.Config{})
	require.Equal(t, 5, rep.Pools[0].Expired)
	for st, id := range expired {
		it, err := e.Store.Get(e.ctx, id)
		require.NoError(t, err)
		require.Equal(t, state.Terminated, it.State, "expired in %s", st)
		require.Contains(t, it.StateReason, "expired in "+string(st))
		ec2State, err := e.InstanceState(e.ctx, id)
		require.NoError(t, err)
		require.Contains(t, []ec2types.InstanceStateName{"terminated", "shutting-down"}, ec2State)
	}
	it, err := e.Store.Get(e.ctx, fresh)
	require.NoError(t, err)
	require.Contains(t, []state.State{state.Created, state.Idle}, it.State,
		"an instance within its deadline stays (warming, or promoted if its agent is ready): %q", it.StateReason)
	require.Contains(t, e.metrics.String(), `"CloudWatchMetrics"`, "metrics in embedded metric format")
	require.Contains(t, e.metrics.String(), `"Expired":5`)
}

// TestOrphansAndGhosts: a launched instance that never got an item is terminated; one whose item
// exists only loses the tag; an item whose instance is gone is marked terminated.
func TestOrphansAndGhosts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	launch := func() string {
		out, err := e.EC2.RunInstances(e.ctx, &ec2.RunInstancesInput{ImageId: aws.String(localenv.AMI), MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
			TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: []ec2types.Tag{
				{Key: aws.String(fleet.TagStack), Value: &e.Stack}, {Key: aws.String(fleet.TagPool), Value: &e.Pool},
				{Key: aws.String(fleet.TagUnrecorded), Value: aws.String("true")}}}}})
		require.NoError(t, err)
		return aws.ToString(out.Instances[0].InstanceId)
	}
	orphan, recorded := launch(), launch()
	require.NoError(t, e.Store.Create(e.ctx, []*state.Instance{{ID: recorded, Pool: e.Pool, Threshold: time.Now().Add(time.Hour)}}))
	ghost := &state.Instance{ID: "i-0fedcba9876543210", Pool: e.Pool, Threshold: time.Now().Add(time.Hour)}
	require.NoError(t, e.Store.Create(e.ctx, []*state.Instance{ghost}))

	rep := e.refresh(refresh.Config{OrphanGrace: time.Nanosecond})
	require.Equal(t, 1, rep.Orphans)
	st, err := e.InstanceState(e.ctx, orphan)
	require.NoError(t, err)
	require.Contains(t, []ec2types.InstanceStateName{"terminated", "shutting-down"}, st)
	st, err = e.InstanceState(e.ctx, recorded)
	require.NoError(t, err)
	require.Equal(t, ec2types.InstanceStateNameRunning, st, "an instance with an item is no orphan")
	out, err := e.EC2.DescribeInstances(e.ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{recorded}})
	require.NoError(t, err)
	for _, tag := range out.Reservations[0].Instances[0].Tags {
		require.NotEqual(t, fleet.TagUnrecorded, aws.ToString(tag.Key), "the leftover tag is removed")
	}
	it, err := e.Store.Get(e.ctx, ghost.ID)
	require.NoError(t, err)
	require.Equal(t, state.Terminated, it.State)
	require.Contains(t, it.StateReason, "missing on EC2")
}

// TestWarmPool: filled from empty, topped up after a claim, shrunk when the schedule shrinks,
// rolled when the spec changes.
func TestWarmPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.schedule(2, 0)

	rep := e.refresh(refresh.Config{})
	require.Equal(t, 2, rep.Pools[0].Launched, "filled from empty in one request")
	require.Len(t, e.inState(state.Created), 2)
	e.waitReady()
	rep = e.refresh(refresh.Config{})
	require.Equal(t, 2, rep.Pools[0].Idle, "READY warm instances join the pool")
	require.Zero(t, rep.Pools[0].Launched)
	warm := ids(e.inState(state.Idle))

	res := e.provision("6201", 1)
	require.Equal(t, 1, res.Reused, "a warm instance is claimed")
	rep = e.refresh(refresh.Config{})
	require.Equal(t, 1, rep.Pools[0].Launched, "topped up after the claim")
	e.waitReady()
	e.refresh(refresh.Config{})
	require.Len(t, e.inState(state.Idle), 2)

	e.schedule(0, 0)
	rep = e.refresh(refresh.Config{})
	require.Empty(t, e.inState(state.Idle), "shrunk: warm instances that never served a run go")
	left := 0
	for _, id := range warm {
		if it, err := e.Store.Get(e.ctx, id); err == nil && it.State != state.Terminated {
			left++
		}
	}
	require.Equal(t, 1, left, "of the first two warm instances only the claimed one remains")
	running := e.inState(state.Running)
	require.Len(t, running, 1, "the claimed instance is never touched")
	for _, a := range rep.Actions {
		require.NotEqual(t, running[0].ID, a.Instance)
	}

	e.schedule(1, 0)
	e.refresh(refresh.Config{})
	e.waitReady()
	e.refresh(refresh.Config{})
	old := ids(e.inState(state.Idle))
	require.Len(t, old, 1)
	require.NoError(t, e.UpdatePool(e.ctx, func(d *pooldoc.Document) { d.SpecHash = "v2" }))
	rep = e.refresh(refresh.Config{})
	require.Equal(t, 1, rep.Pools[0].Launched, "rolled: the outdated instance is replaced")
	it, err := e.Store.Get(e.ctx, old[0])
	require.NoError(t, err)
	require.Equal(t, state.Terminated, it.State)
	require.Contains(t, it.StateReason, "outdated spec local")
}

// TestStoppedWarmInstanceClaimed: the stopped part of a warm pool is stopped on EC2; provision
// claims a stopped instance, starts it and gets its runner.
func TestStoppedWarmInstanceClaimed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.schedule(0, 1)
	e.refresh(refresh.Config{})
	e.waitReady()
	rep := e.refresh(refresh.Config{})
	require.Equal(t, 1, rep.Pools[0].Stops)
	stopped := e.inState(state.Stopped)
	require.Len(t, stopped, 1)
	st, err := e.InstanceState(e.ctx, stopped[0].ID)
	require.NoError(t, err)
	require.Contains(t, []ec2types.InstanceStateName{"stopped", "stopping"}, st)

	res := e.provision("6301", 1)
	require.Equal(t, 1, res.Reused)
	require.Equal(t, stopped[0].ID, res.Instances[0].ID, "the stopped instance is claimed and started")
	st, err = e.InstanceState(e.ctx, stopped[0].ID)
	require.NoError(t, err)
	require.Equal(t, ec2types.InstanceStateNameRunning, st)
}

// TestConcurrentRefreshes: two refreshes at once terminate each expired instance once and fill a
// deficit once.
func TestConcurrentRefreshes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.schedule(2, 0)
	var expired []string
	for range 3 {
		id, err := e.Launch(e.ctx, time.Now().Add(-time.Second))
		require.NoError(t, err)
		expired = append(expired, id)
	}
	var wg sync.WaitGroup
	reports := make([]*refresh.Report, 2)
	for i := range reports {
		wg.Go(func() { reports[i] = e.refresh(refresh.Config{}) })
	}
	wg.Wait()
	require.Equal(t, 3, reports[0].Pools[0].Expired+reports[1].Pools[0].Expired, "each expired instance terminated once")
	require.Equal(t, 2, reports[0].Pools[0].Launched+reports[1].Pools[0].Launched, "the deficit filled once")
	require.Len(t, append(e.inState(state.Created), e.inState(state.Idle)...), 2, "warming, or promoted if ready")
	for _, id := range expired {
		it, err := e.Store.Get(e.ctx, id)
		require.NoError(t, err)
		require.Equal(t, state.Terminated, it.State)
	}
}

// TestDryRun changes nothing and says what it would do.
func TestDryRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.schedule(1, 0)
	id, err := e.Launch(e.ctx, time.Now().Add(-time.Second))
	require.NoError(t, err)
	rep := e.refresh(refresh.Config{DryRun: true})
	require.True(t, rep.DryRun)
	var did []string
	for _, a := range rep.Actions {
		did = append(did, a.Do+" "+a.Instance)
	}
	require.Contains(t, did, "terminate "+id)
	require.Contains(t, strings.Join(did, ","), "launch")
	it, err := e.Store.Get(e.ctx, id)
	require.NoError(t, err)
	require.Equal(t, state.Created, it.State, "dry: nothing changed")
	require.Len(t, e.inState(state.Created), 1)
}

// TestSpotInterruption: a spot interruption warning marks the instance terminated at once; its
// pool offer goes stale.
func TestSpotInterruption(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, err := e.Launch(e.ctx, time.Time{})
	require.NoError(t, err)
	_, err = e.Warm(e.ctx, id)
	require.NoError(t, err)
	// The agent is cut off, so that only refresh acts: a live agent powers its instance off the
	// moment its item reads terminated (its doorbell deleted), which is not refresh's doing.
	require.NoError(t, e.Sim.SetDynamoDB(id, false))
	require.NoError(t, e.Sim.SetSQS(id, false))
	w := e.refreshDeps()
	act, err := refresh.Interrupted(e.ctx, w, id)
	st, err2 := e.InstanceState(e.ctx, id)
	require.NoError(t, err2)
	require.Equal(t, ec2types.InstanceStateNameRunning, st, "the warning only marks the item: EC2 reclaims the machine itself")
	require.NoError(t, err)
	require.Equal(t, "terminate", act.Do)
	it, err := e.Store.Get(e.ctx, id)
	require.NoError(t, err)
	require.Equal(t, state.Terminated, it.State)
	require.Equal(t, "spot interruption warning", it.StateReason)
	act, err = refresh.Interrupted(e.ctx, w, "i-0123456789abcdef9")
	require.NoError(t, err)
	require.Nil(t, act, "an instance Hangar does not know is ignored")
}

// TestExpiryLosingToAClaimTerminatesNothing: an idle instance past its deadline is claimed by a
// run between refresh's read and its write; the write loses and the instance lives on, claimed.
func TestExpiryLosingToAClaimTerminatesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, err := e.Launch(e.ctx, time.Time{})
	require.NoError(t, err)
	in, err := e.Warm(e.ctx, id)
	require.NoError(t, err)
	_, err = e.Transition(e.ctx, state.Change{InstanceID: id, From: state.Idle, To: state.Stopped, Version: in.Version})
	require.NoError(t, err)
	in, err = e.Store.Get(e.ctx, id)
	require.NoError(t, err)
	_, err = e.Transition(e.ctx, state.Change{InstanceID: id, From: state.Stopped, To: state.Idle, Version: in.Version, Threshold: time.Now().Add(-time.Second)})
	require.NoError(t, err)

	rep := e.refreshRacingAClaim(id, "6300", "")
	require.Zero(t, rep.Pools[0].Expired, "refresh ended nothing it did not win")
}

// TestRefreshTidiesOffers: a refresh deletes the offer a claimer killed before its delete left
// behind (the instance is claimed now) and offers again an idle instance whose offer was lost,
// so that afterwards the pool offers exactly its idle instances, once each.
func TestRefreshTidiesOffers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.schedule(2, 0)
	e.refresh(refresh.Config{})
	e.waitReady()
	e.refresh(refresh.Config{})
	idle := e.inState(state.Idle)
	require.Len(t, idle, 2)
	taken, kept := idle[0], idle[1]

	// The claim of a provision killed before it deleted the message: the offer stays, stale.
	_, err := e.Store.Transition(e.ctx, state.Change{InstanceID: taken.ID, Pool: e.Pool, From: state.Idle, To: state.Claimed,
		Version: taken.Version, Assign: &state.Assignment{RunID: "6401", Repo: localenv.Repo}, Threshold: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	// The other's offer is gone, as if a release had died between its write and its publish.
	client := sqs.NewFromConfig(e.AWS)
	for seen := 0; seen < 2; {
		out, err := client.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{QueueUrl: &e.Doc.QueueURL, MaxNumberOfMessages: 10,
			VisibilityTimeout: 60, WaitTimeSeconds: 1})
		require.NoError(t, err)
		for _, m := range out.Messages {
			seen++
			msg, err := offers.ParseMessage(aws.ToString(m.Body), e.Pool)
			require.NoError(t, err)
			if msg.InstanceID == kept.ID {
				_, err = client.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: &e.Doc.QueueURL, ReceiptHandle: m.ReceiptHandle})
			} else {
				_, err = client.ChangeMessageVisibility(e.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &e.Doc.QueueURL,
					ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
			}
			require.NoError(t, err)
		}
	}

	rep := e.refresh(refresh.Config{})
	require.Equal(t, 1, rep.Pools[0].OffersDropped, "the claimed instance's stale offer")
	require.Equal(t, 1, rep.Pools[0].Reoffered, "the idle instance without an offer")
	require.Equal(t, 1, rep.Pools[0].Depth)
	offered, err := e.Offered(e.ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{kept.ID: 1}, offered)
}

// TestRefreshPublishesWhatRunsCost: a refresh publishes the cost of the runs that ended, per
// pool and repository, once: a dry run publishes nothing, and the next refresh nothing again.
func TestRefreshPublishesWhatRunsCost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A run that ended five minutes ago (past the publisher's lag), on a priced instance.
	past, err := state.NewStore(e.DynamoDB(), e.Table, e.Store.Account())
	require.NoError(t, err)
	past.Now = func() time.Time { return time.Now().Add(-5 * time.Minute) }
	deadline := time.Now().Add(time.Hour)
	in := &state.Instance{ID: "i-0c05700000000000a", Pool: e.Pool, Threshold: deadline,
		Spec: state.Spec{InstanceType: "c7i.large", UsageClass: state.UsageOnDemand, Price: 0.0893, PriceSource: state.PriceOnDemand}}
	require.NoError(t, past.Create(e.ctx, []*state.Instance{in}))
	idle, err := past.Transition(e.ctx, state.Change{InstanceID: in.ID, Pool: e.Pool, From: state.Created, To: state.Idle, Version: 1, Threshold: deadline})
	require.NoError(t, err)
	claimed, err := past.Transition(e.ctx, state.Change{InstanceID: in.ID, Pool: e.Pool, From: state.Idle, To: state.Claimed, Version: idle.Version,
		Threshold: deadline, Reuse: state.ReuseAny, Assign: &state.Assignment{RunID: "990", RunAttempt: 1, Repo: localenv.Repo}})
	require.NoError(t, err)
	w := past.TransitionAll(e.ctx, []state.Change{{InstanceID: in.ID, Pool: e.Pool, From: state.Claimed, To: state.Idle, Version: claimed.Version,
		RunID: "990", Threshold: deadline, Reason: "released by run 990"}}, []state.Instance{*claimed})[0]
	require.NoError(t, w.Err)

	costLines := func() []map[string]any {
		var out []map[string]any
		for _, l := range strings.Split(e.metrics.String(), "\n") {
			if !strings.Contains(l, `"RunCostUSD"`) {
				continue
			}
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(l), &m), l)
			out = append(out, m)
		}
		return out
	}
	e.refresh(refresh.Config{DryRun: true})
	require.Empty(t, costLines(), "a dry run publishes nothing")
	e.refresh(refresh.Config{})
	lines := costLines()
	require.Len(t, lines, 1, e.metrics.String())
	require.Equal(t, e.Pool, lines[0]["Pool"])
	require.Equal(t, localenv.Repo, lines[0]["Repository"])
	require.Equal(t, e.Stack, lines[0]["Stack"])
	require.Greater(t, lines[0]["RunCostUSD"].(float64), 0.0)
	require.InDelta(t, lines[0]["RunInstanceSeconds"].(float64)*0.0893/3600, lines[0]["RunCostUSD"].(float64), 1e-12, "seconds × the launch price")
	e.refresh(refresh.Config{})
	require.Len(t, costLines(), 1, "published once")
}
