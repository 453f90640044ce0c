package provision_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
	"github.com/hangar-ci/hangar/pkg/steps/release"
)

// These tests run provision's orchestration on the in-memory fakes (internal/testkit/fake): no
// emulator, no agent process. The fake agent answers for every instance as a live one would
// unless a test tells it otherwise.

const fakeRepo = "octo/app"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fakeDeps wires provision to w: the real pool (offers selector and queue on the fake SQS, fleet
// launcher on the fake EC2) on the fakes.
func fakeDeps(t *testing.T, w *fake.World) provision.Deps {
	t.Helper()
	return provision.Deps{Doc: w.Doc, Pool: w.Pool, GitHub: w.GitHub, Log: quiet}
}

func fakeConfig(w *fake.World, run string, n int) provision.Config {
	return provision.Config{Stack: fake.Stack, Pool: w.Doc.Name, Count: n, RunID: run, RunAttempt: 1, Repository: fakeRepo,
		RegistrationTimeout: time.Minute, PollInterval: 10 * time.Millisecond}
}

func fakeRun(t *testing.T, w *fake.World, cfg provision.Config) (*provision.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return provision.Run(ctx, cfg, fakeDeps(t, w))
}

// mustRun provisions n instances for run: their agents have registered their runners on the
// fake GitHub, and heartbeat while they serve, so that the instances can be claimed again once
// released.
func mustRun(t *testing.T, w *fake.World, run string, n int) *provision.Result {
	t.Helper()
	res, err := fakeRun(t, w, fakeConfig(w, run, n))
	require.NoError(t, err)
	require.Len(t, res.Instances, n)
	return res
}

// fakeRelease releases run with the release step on w's pool, as the run's last job does.
func fakeRelease(t *testing.T, w *fake.World, run string) *release.Result {
	t.Helper()
	r, err := release.New(release.Config{DeregisterTimeout: 30 * time.Second, PollInterval: 10 * time.Millisecond},
		release.Deps{Pool: w.Pool, GitHub: w.GitHub, Runners: state.RunnerNamesOf(fake.Stack), Log: quiet})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := r.Release(ctx, run)
	require.NoError(t, err)
	return res
}

// requireHeld asserts that ids are exactly the instances holding run, each running for it.
func requireHeld(t *testing.T, w *fake.World, run string, ids ...string) {
	t.Helper()
	held, err := w.Store.ByRun(context.Background(), run)
	require.NoError(t, err)
	var got []string
	for _, in := range held {
		require.Equal(t, state.Running, in.State, "%s", in.ID)
		got = append(got, in.ID)
	}
	require.ElementsMatch(t, ids, got)
}

func resultIDs(res *provision.Result) []string {
	out := make([]string, len(res.Instances))
	for i, in := range res.Instances {
		out[i] = in.ID
	}
	return out
}

func TestFakeReusesIdleBeforeCreating(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	idle := w.AddIdle(t, fake.Idle{Served: []string{fakeRepo}, LastRun: "100"})

	res, err := fakeRun(t, w, fakeConfig(w, "200", 2))
	require.NoError(t, err)
	require.Equal(t, 1, res.Reused)
	require.Equal(t, 1, res.Created)
	require.Contains(t, resultIDs(res), idle.ID)
	requireHeld(t, w, "200", resultIDs(res)...)
	require.Len(t, w.EC2.Fleets(), 1, "one fleet request for the one instance the pool did not have")
	require.EqualValues(t, 1, *w.EC2.Fleets()[0].TargetCapacitySpecification.TotalTargetCapacity)
	require.Empty(t, w.Offered(t), "the claimed offer is used up")
}

func TestFakeFailedRegistrationIsGivenBackAndReplaced(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	bad := w.AddIdle(t, fake.Idle{Served: []string{fakeRepo}, LastRun: "100"})
	w.Agent.Behave(bad.ID, fake.FailRegister)

	res, err := fakeRun(t, w, fakeConfig(w, "200", 1))
	require.NoError(t, err)
	require.Equal(t, 1, res.Replaced)
	require.Equal(t, 1, res.Created, "a new instance replaces it")
	require.Zero(t, res.Reused)
	require.Len(t, res.Failures, 1)
	require.Equal(t, bad.ID, res.Failures[0].ID)
	require.Contains(t, strings.Join(res.Warnings, "\n"), bad.ID+" could not register")
	require.NotContains(t, resultIDs(res), bad.ID)
	requireHeld(t, w, "200", resultIDs(res)...)

	it := w.Store.Item(bad.ID)
	require.Equal(t, state.Idle, it.State, "given back to the pool")
	require.Empty(t, it.RunID)
	require.Equal(t, 1, it.RegisterFailures, "the failure is counted")
	require.Equal(t, []string{bad.ID}, w.Offered(t), "offered again")
	require.Equal(t, ec2types.InstanceStateNameRunning, w.EC2.State(bad.ID))
}

// TestFakeTooManyFailedRegistrationsTerminate: both pooled instances are claimed; the one whose
// registration failed once already fails a second time in a row and is terminated, not offered
// again; the other registers, which resets its count of failures.
func TestFakeTooManyFailedRegistrationsTerminate(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	bad := w.AddIdle(t, fake.Idle{Served: []string{fakeRepo}, LastRun: "100", RegisterFailures: state.MaxRegisterFailures - 1})
	w.Agent.Behave(bad.ID, fake.FailRegister)
	good := w.AddIdle(t, fake.Idle{Served: []string{fakeRepo}, LastRun: "100", RegisterFailures: state.MaxRegisterFailures - 1})

	res, err := fakeRun(t, w, fakeConfig(w, "200", 2))
	require.NoError(t, err)
	require.Equal(t, 1, res.Replaced)
	require.Equal(t, 1, res.Reused)
	require.Equal(t, 1, res.Created)
	require.Contains(t, resultIDs(res), good.ID)
	it := w.Store.Item(bad.ID)
	require.Equal(t, state.Terminated, it.State)
	require.Contains(t, it.StateReason, fmt.Sprintf("%d registrations in a row failed", state.MaxRegisterFailures))
	require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(bad.ID))
	require.Empty(t, w.Offered(t), "not offered again")
	requireHeld(t, w, "200", resultIDs(res)...)
	for _, id := range resultIDs(res) {
		require.Zero(t, w.Store.Item(id).RegisterFailures, "%s: a registered runner resets the count", id)
	}
}

// TestFakeAskedAgainHandsOverAgain: agents that lost their hand-over (restarted after receiving
// it) ask for the token; provision, still waiting, hands it over once more, and the runners
// register: one claimed instance (provision waits on it by conditional writes) or two (it reads
// them). Nothing but the doorbell carried the token: the items hold none.
func TestFakeAskedAgainHandsOverAgain(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			w := fake.NewWorld(t, nil)
			var pooled []string
			for range n {
				idle := w.AddIdle(t, fake.Idle{Served: []string{fakeRepo}, LastRun: "100"})
				w.Agent.Behave(idle.ID, fake.Forgetful)
				pooled = append(pooled, idle.ID)
			}

			res := mustRun(t, w, "200", n)
			require.Equal(t, n, res.Reused)
			require.Zero(t, res.Replaced)
			requireHeld(t, w, "200", pooled...)
			for _, id := range pooled {
				it := w.Store.Item(id)
				require.Equal(t, 1, it.Asks, "%s: the agent asked once", id)
				require.Equal(t, it.Version-1, it.AskVersion, "%s: about the claim's version", id)
				var handOvers []doorbell.HandOver
				for _, body := range w.SQS.Bodies(w.Bells.URL(id)) {
					var h doorbell.HandOver
					require.NoError(t, json.Unmarshal([]byte(body), &h))
					handOvers = append(handOvers, h)
				}
				require.Len(t, handOvers, 2, "%s: handed over at the claim, and again when asked", id)
				for _, h := range handOvers {
					require.Equal(t, "200", h.Run)
					require.Equal(t, it.AskVersion, h.Version)
					require.Equal(t, doorbell.KindRegistration, h.Kind)
					require.NotEmpty(t, h.Secret)
				}
			}
			require.Len(t, w.GitHub.RunnerNames(), n, "one runner per instance")
		})
	}
}

func TestFakeRollbackLeavesNothingClaimed(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	idle := w.AddIdle(t, fake.Idle{Served: []string{fakeRepo}, LastRun: "100"})
	// The claim wins; the launch of the second instance fails for good (a bad image), and the
	// provision fails.
	w.EC2.Inject("CreateFleet", fake.APIError("InvalidAMIID.NotFound", "The image id '[ami-0bad]' does not exist"))

	_, err := fakeRun(t, w, fakeConfig(w, "200", 2))
	var perr *provision.Error
	require.ErrorAs(t, err, &perr)
	require.ErrorContains(t, err, "ami-0bad")

	held, err := w.Store.ByRun(context.Background(), "200")
	require.NoError(t, err)
	require.Empty(t, held, "nothing is left holding the run")
	it := w.Store.Item(idle.ID)
	require.Equal(t, state.Idle, it.State, "the claimed instance is given back")
	require.Equal(t, []string{idle.ID}, w.Offered(t), "and offered again")

	require.Len(t, w.Store.Items(), 1, "nothing was created")
	require.Empty(t, w.EC2.InState(ec2types.InstanceStateNameTerminated))
}

// TestFakeCapacityFallsBackToAnotherType: with no capacity for the first type anywhere and none
// for the second in the first zone, the instances come from what is left, in the same request
// (EC2 Fleet falls back across its overrides).
func TestFakeCapacityFallsBackToAnotherType(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil) // c7i.large, then c6i.large; us-east-1a, then us-east-1b
	az0 := w.Doc.Subnets[0].AZ
	w.EC2.NoCapacity("c7i.large", "", "")
	w.EC2.NoCapacity("c6i.large", az0, "")

	res, err := fakeRun(t, w, fakeConfig(w, "200", 3))
	require.NoError(t, err)
	require.Len(t, res.Instances, 3)
	require.Equal(t, 3, res.Created)
	for _, in := range res.Instances {
		require.Equal(t, "c6i.large", in.Type, "no c7i capacity anywhere")
		require.NotEqual(t, az0, in.AZ, "no c6i capacity in %s", az0)
		require.Equal(t, "c6i.large", w.Store.Item(in.ID).InstanceType)
	}
	require.Equal(t, 1, w.EC2.Calls("CreateFleet"), "one request")
	requireHeld(t, w, "200", resultIDs(res)...)
}

// TestPartialFulfilment: a fleet that launches fewer than asked keeps what it got and asks again
// for the rest.
func TestPartialFulfilment(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	w.EC2.Partial(1)

	res, err := fakeRun(t, w, fakeConfig(w, "200", 3))
	require.NoError(t, err)
	require.Equal(t, 3, res.Created)
	require.Equal(t, 2, w.EC2.Calls("CreateFleet"), "one more request for the missing two")
	requireHeld(t, w, "200", resultIDs(res)...)
}

func TestFakeCapacityFallsBackToOnDemand(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil) // market spot-fallback
	w.EC2.NoCapacity("", "", fake.Spot)

	res, err := fakeRun(t, w, fakeConfig(w, "200", 2))
	require.NoError(t, err)
	require.Len(t, res.Instances, 2)
	for _, in := range res.Instances {
		require.Equal(t, state.UsageOnDemand, in.UsageClass, "%s", in.ID)
		require.Equal(t, state.UsageOnDemand, w.Store.Item(in.ID).UsageClass)
	}
	fleets := w.EC2.Fleets()
	require.Len(t, fleets, 2, "one spot request refused everywhere, then one on-demand")
	require.Equal(t, ec2types.DefaultTargetCapacityTypeSpot, fleets[0].TargetCapacitySpecification.DefaultTargetCapacityType)
	require.Equal(t, ec2types.DefaultTargetCapacityTypeOnDemand, fleets[1].TargetCapacitySpecification.DefaultTargetCapacityType)
	requireHeld(t, w, "200", resultIDs(res)...)
}

// TestFakeNoCapacityAnywhereFailsAndRollsBack: with no capacity at all, provision retries with
// backoff until its deadline (the caller's, here, sooner than its registration timeout), then
// fails saying why, and nothing is left behind.
func TestFakeNoCapacityAnywhereFailsAndRollsBack(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, fake.Pool(t, "linux", func(doc map[string]any) { doc["market"] = "spot" }))
	w.EC2.NoCapacity("", "", "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	start := time.Now()
	_, err := provision.Run(ctx, fakeConfig(w, "200", 2), fakeDeps(t, w))
	require.ErrorIs(t, err, fleet.ErrNoCapacity)
	require.ErrorContains(t, err, "InsufficientInstanceCapacity")
	require.Less(t, time.Since(start), 30*time.Second, "gives up at its deadline, not at the registration timeout (a minute)")
	require.Greater(t, w.EC2.Calls("CreateFleet"), 1, "retried with backoff before giving up")
	require.Empty(t, w.Store.Items(), "nothing was launched, nothing recorded")
	require.Empty(t, w.EC2.InState(ec2types.InstanceStateNameRunning))
	held, err := w.Store.ByRun(context.Background(), "200")
	require.NoError(t, err)
	require.Empty(t, held)
}

// TestFakeDrainedPoolClaimsNothing: a drained pool's idle instance is not claimed, even though it
// is offered: the run gets new instances.
func TestFakeDrainedPoolClaimsNothing(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	idle := w.AddIdle(t, fake.Idle{Served: []string{fakeRepo}, LastRun: "100"})
	w.Doc.Drained = true

	res, err := fakeRun(t, w, fakeConfig(w, "201", 2))
	require.NoError(t, err)
	require.Zero(t, res.Reused)
	require.Equal(t, 2, res.Created)
	require.NotContains(t, resultIDs(res), idle.ID)
	it, err := w.Store.Get(context.Background(), idle.ID)
	require.NoError(t, err)
	require.Equal(t, state.Idle, it.State, "left for refresh to retire")
}

// TestFakeOverTheCap: a provision of 3 on a pool with maxInstances 2 fails at once, before the
// registration timeout, with a message naming the cap and the way to wait, and holds nothing
// after; with wait-for-capacity it takes the room the cap leaves and waits for the rest: once
// another run is released, its instance is claimed and the provision completes, never more than
// two instances live.
func TestFakeOverTheCap(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, fake.Pool(t, "linux", func(doc map[string]any) { doc["maxInstances"] = 2 }))
	start := time.Now()
	_, err := fakeRun(t, w, fakeConfig(w, "200", 3))
	require.ErrorIs(t, err, pool.ErrAtCapacity)
	require.ErrorContains(t, err, "pool linux has 0 live instances of its maxInstances 2, so 1 of 3 could not be created")
	require.ErrorContains(t, err, "wait-for-capacity")
	require.Less(t, time.Since(start), 30*time.Second, "at once, not at the registration timeout")
	held, err := w.Store.ByRun(context.Background(), "200")
	require.NoError(t, err)
	for _, in := range held {
		require.NotEqual(t, state.Running, in.State, "given back: %s", in.ID)
	}

	w = fake.NewWorld(t, fake.Pool(t, "linux", func(doc map[string]any) { doc["maxInstances"] = 2 }))
	first := mustRun(t, w, "300", 1)
	cfg := fakeConfig(w, "301", 2)
	cfg.WaitForCapacity = true
	done := make(chan error, 1)
	var res *provision.Result
	go func() {
		var err error
		res, err = fakeRun(t, w, cfg)
		done <- err
	}()
	require.NoError(t, w.Store.Wait(t.Context(), func(items map[string]*state.Instance) bool {
		n := 0
		for _, it := range items {
			if it.RunID == "301" {
				n++
			}
		}
		return n == 1
	}), "the room left is taken while the rest waits")
	select {
	case err := <-done:
		t.Fatalf("provision ended while the cap was full: %v", err)
	default:
	}
	fakeRelease(t, w, "300")
	require.NoError(t, <-done)
	require.Len(t, res.Instances, 2)
	require.Contains(t, resultIDs(res), first.Instances[0].ID, "the released instance was claimed")
	c, err := w.Store.Census(context.Background(), "linux")
	require.NoError(t, err)
	require.Equal(t, 2, c.Live(), "never more than the cap")
}
