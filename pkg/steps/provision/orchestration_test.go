package provision_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
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

func TestFakeReuseScopeKeepsAnotherRepositorysInstance(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil) // reuse: repository
	other := w.AddIdle(t, fake.Idle{Served: []string{"someone/else"}, LastRun: "100"})

	res, err := fakeRun(t, w, fakeConfig(w, "200", 1))
	require.NoError(t, err)
	require.Zero(t, res.Reused)
	require.Equal(t, 1, res.Created)
	require.NotContains(t, resultIDs(res), other.ID)
	it := w.Store.Item(other.ID)
	require.Equal(t, state.Idle, it.State, "not claimed")
	require.Equal(t, other.Version, it.Version, "not written")
	require.Equal(t, []string{other.ID}, w.Offered(t), "its offer stays for runs of its repository")
}

func TestFakeFailedRegistrationIsGivenBackAndReplaced(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	bad := w.AddIdle(t, fake.Idle{Served: []string{fakeRepo}, LastRun: "100"})
	w.Agent.Behave(bad.ID, fake.FailRegister)

	res, err := fakeRun(t, w, fakeConfig(w, "200", 1))
	require.NoError(t, err)
	require.Equal(t, 1, res.Replaced)
	require.Len(t, res.Failures, 1)
	require.Equal(t, bad.ID, res.Failures[0].ID)
	require.NotContains(t, resultIDs(res), bad.ID)
	requireHeld(t, w, "200", resultIDs(res)...)

	it := w.Store.Item(bad.ID)
	require.Equal(t, state.Idle, it.State, "given back to the pool")
	require.Empty(t, it.RunID)
	require.Equal(t, 1, it.RegisterFailures, "the failure is counted")
	require.Equal(t, []string{bad.ID}, w.Offered(t), "offered again")
	require.Equal(t, ec2types.InstanceStateNameRunning, w.EC2.State(bad.ID))
}

func TestFakeTooManyFailedRegistrationsTerminate(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	bad := w.AddIdle(t, fake.Idle{Served: []string{fakeRepo}, LastRun: "100", RegisterFailures: state.MaxRegisterFailures - 1})
	w.Agent.Behave(bad.ID, fake.FailRegister)

	res, err := fakeRun(t, w, fakeConfig(w, "200", 1))
	require.NoError(t, err)
	require.Equal(t, 1, res.Replaced)
	require.Equal(t, state.Terminated, w.Store.Item(bad.ID).State)
	require.Equal(t, ec2types.InstanceStateNameTerminated, w.EC2.State(bad.ID))
	require.Empty(t, w.Offered(t), "not offered again")
	requireHeld(t, w, "200", resultIDs(res)...)
}

// TestFakeAskedAgainHandsOverAgain: an agent that lost its hand-over (restarted after receiving
// it) asks for the token; provision, still waiting, hands it over once more, and the runner
// registers. Nothing but the doorbell carried the token: the item holds none.
func TestFakeAskedAgainHandsOverAgain(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	idle := w.AddIdle(t, fake.Idle{Served: []string{fakeRepo}, LastRun: "100"})
	w.Agent.Behave(idle.ID, fake.Forgetful)

	res, err := fakeRun(t, w, fakeConfig(w, "200", 1))
	require.NoError(t, err)
	require.Equal(t, 1, res.Reused)
	requireHeld(t, w, "200", idle.ID)
	it := w.Store.Item(idle.ID)
	require.Equal(t, 1, it.Asks, "the agent asked once")
	require.Equal(t, it.Version-1, it.AskVersion, "about the claim's version")
	var handOvers []doorbell.HandOver
	for _, body := range w.SQS.Bodies(w.Bells.URL(idle.ID)) {
		var h doorbell.HandOver
		require.NoError(t, json.Unmarshal([]byte(body), &h))
		handOvers = append(handOvers, h)
	}
	require.Len(t, handOvers, 2, "handed over at the claim, and again when asked")
	for _, h := range handOvers {
		require.Equal(t, "200", h.Run)
		require.Equal(t, it.AskVersion, h.Version)
		require.Equal(t, doorbell.KindRegistration, h.Kind)
		require.NotEmpty(t, h.Secret)
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

func TestFakeCapacityFallsBackToAnotherType(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil) // c7i.large, then c6i.large
	w.EC2.NoCapacity("c7i.large", "", "")

	res, err := fakeRun(t, w, fakeConfig(w, "200", 1))
	require.NoError(t, err)
	require.Len(t, res.Instances, 1)
	require.Equal(t, "c6i.large", res.Instances[0].Type)
	require.Equal(t, "c6i.large", w.Store.Item(res.Instances[0].ID).InstanceType)
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

func TestFakeNoCapacityAnywhereFailsAndRollsBack(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, fake.Pool(t, "linux", func(doc map[string]any) { doc["market"] = "spot" }))
	w.EC2.NoCapacity("", "", "")
	// The launcher backs off until the provision's deadline: the caller's, here.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	_, err := provision.Run(ctx, fakeConfig(w, "200", 1), fakeDeps(t, w))
	require.ErrorIs(t, err, fleet.ErrNoCapacity)
	require.Empty(t, w.Store.Items(), "nothing was launched, nothing recorded")
	require.Empty(t, w.EC2.InState(ec2types.InstanceStateNameRunning))
}

func TestFakeEarlierAttemptIsGivenBack(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	first, err := fakeRun(t, w, fakeConfig(w, "200", 1))
	require.NoError(t, err)
	earlier := first.Instances[0].ID

	cfg := fakeConfig(w, "200", 1)
	cfg.RunAttempt = 2
	second, err := fakeRun(t, w, cfg)
	require.NoError(t, err)

	held, err := w.Store.ByRun(context.Background(), "200")
	require.NoError(t, err)
	require.Len(t, held, 1)
	require.Equal(t, 2, held[0].RunAttempt, "only the second attempt's instance holds the run")
	require.Equal(t, resultIDs(second), []string{held[0].ID})
	it := w.Store.Item(earlier)
	require.Equal(t, "200", it.LastRunID, "the earlier attempt's instance was released")
	if it.ID != held[0].ID { // not claimed again by the second attempt: idle and offered
		require.Equal(t, state.Idle, it.State)
		require.True(t, slices.Contains(w.Offered(t), earlier))
	}
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
