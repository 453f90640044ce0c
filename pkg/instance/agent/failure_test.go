package agent_test

import (
	"os"
	osuser "os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// TestRegistrationFailure: GitHub refuses the token; the agent signals REGISTER_FAILED with the
// log tail, registers nothing, and serves the next assignment once one can succeed.
func TestRegistrationFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{Baked: true})
	id := e.launch(time.Time{})
	in := e.warm(id)

	e.GH.RefuseRegistrations(true)
	claimed := e.claim(in, "2001")
	failed := e.waitSignal(id, state.SignalRegisterFailed, "2001", claimed.Version)
	require.Contains(t, failed.SignalLog, "registration refused", "the runner's own output is in the log tail")
	require.Contains(t, failed.SignalLog, "hangar-agent: config.sh")
	for _, secret := range e.GH.Secrets() {
		require.NotContains(t, failed.SignalLog, secret, "the token never lands in the log")
	}
	require.NotEmpty(t, e.GH.Secrets())
	require.Empty(t, e.GH.Runners(""))

	// Provision gives it back (claimed → idle) and another run claims it.
	e.GH.RefuseRegistrations(false)
	back := e.transition(state.Change{InstanceID: id, From: state.Claimed, To: state.Idle, Version: failed.Version, RunID: "2001"})
	again := e.claim(back, "2002")
	e.waitSignal(id, state.SignalRegistered, "2002", again.Version)
	require.Len(t, e.GH.Runners(repo), 1)
}

// TestPreRunnerFailure: the pool's pre-runner script fails; the agent signals FAILED with the
// script's output, and takes no work.
func TestPreRunnerFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{PreRunner: "echo installing tools; echo 'E: package jq not found' >&2; exit 3"})
	id := e.launch(time.Time{})
	failed := e.waitSignal(id, state.SignalFailed, "", 1)
	require.Contains(t, failed.SignalLog, "installing tools")
	require.Contains(t, failed.SignalLog, "E: package jq not found")
	require.Contains(t, failed.SignalLog, "exit status 3")

	idle := e.transition(state.Change{InstanceID: id, From: state.Created, To: state.Idle, Version: failed.Version})
	claimed := e.claim(idle, "2101")
	time.Sleep(2 * time.Second) // the agent polls every 250ms (10s once failed): long enough to have looked
	got, err := e.Store.Get(e.ctx, id)
	require.NoError(t, err)
	require.False(t, got.SignalFor(state.SignalRegistered, "2101", claimed.Version), "a failed instance never serves")
	require.Empty(t, e.GH.Runners(""))
}

// TestChecksumMismatch: the downloaded runner does not match the published SHA-256; the agent
// signals FAILED and never runs it.
func TestChecksumMismatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{BadChecksum: true})
	id := e.launch(time.Time{})
	failed := e.waitSignal(id, state.SignalFailed, "", 1)
	require.Contains(t, failed.SignalLog, "runner checksum mismatch")
	require.Contains(t, failed.SignalLog, e.TarSum, "the log names the checksum it got")
	require.NoFileExists(t, filepath.Join(e.Sim.RunnerDir(id), "config.sh"), "nothing unpacked")
}

// TestDynamoDBUnreachableThenBack: with DynamoDB cut off the agent backs off (no hot loop) and
// keeps going; when it is back, the agent serves the next claim.
func TestDynamoDBUnreachableThenBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{Baked: true})
	id := e.launch(time.Time{})
	in := e.warm(id)

	require.NoError(t, e.Sim.SetDynamoDB(id, false))
	before := e.Sim.RequestCount(id)
	time.Sleep(6 * time.Second) // an outage to ride out
	require.NoError(t, e.Sim.SetDynamoDB(id, true))
	during := e.Sim.RequestCount(id) - before
	require.Zero(t, during, "cut off: no request got through")
	require.Contains(t, e.Sim.AgentLog(id), "cannot read own item; keeping the last deadline")

	claimed := e.claim(in, "2201")
	e.waitSignal(id, state.SignalRegistered, "2201", claimed.Version)
	require.Contains(t, e.Sim.AgentLog(id), "own item readable again")
	warnings := strings.Count(e.Sim.AgentLog(id), "cannot read own item")
	require.LessOrEqual(t, warnings, 5, "outage warnings are rate-limited (1, 2, 4, … failures)")
}

// TestSelfTerminationWithDynamoDBDown: past its deadline, with DynamoDB unreachable, the agent
// terminates its own instance through EC2.
func TestSelfTerminationWithDynamoDBDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{Baked: true, AgentArgs: []string{"--terminate-grace", "1s"}})
	// The deadline leaves a busy machine time to boot the instance and the agent to initialise
	// (a few seconds here, more under load): past it before READY, the agent ends at once.
	id := e.launch(time.Now().Add(20 * time.Second))
	e.waitSignal(id, state.SignalReady, "", 1) // the agent has read its deadline
	require.NoError(t, e.Sim.SetDynamoDB(id, false))

	e.waitTerminated(id, time.Minute)
	require.Contains(t, e.Sim.AgentLog(id), "past its deadline")
}

// TestSpotNotice: a spot interruption notice makes the agent signal SPOT_INTERRUPTED and take no
// new work.
func TestSpotNotice(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{Baked: true})
	id := e.launch(time.Time{})
	in := e.warm(id)

	require.NoError(t, e.Sim.Interrupt(e.ctx, id))
	spot := e.waitSignal(id, state.SignalSpotInterrupted, "", in.Version)
	require.Contains(t, spot.SignalLog, "terminate", "the notice is recorded")

	claimed := e.claim(spot, "2301")
	time.Sleep(2 * time.Second)
	got, err := e.Store.Get(e.ctx, id)
	require.NoError(t, err)
	require.False(t, got.SignalFor(state.SignalRegistered, "2301", claimed.Version), "an interrupted instance takes no new run")
	require.Empty(t, e.GH.Runners(""))
}

// TestTerminatedItemEndsInstance: when the control plane marks the item terminated, the agent
// terminates the instance at once (refresh's own EC2 call may have failed).
func TestTerminatedItemEndsInstance(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{Baked: true})
	id := e.launch(time.Time{})
	in := e.warm(id)
	e.transition(state.Change{InstanceID: id, From: state.Idle, To: state.Terminated, Version: in.Version})
	e.waitTerminated(id, 20*time.Second)
}

// TestOrphanWithoutItem: an instance whose item never appears terminates itself after the boot
// wait.
func TestOrphanWithoutItem(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{Baked: true, AgentArgs: []string{"--boot-wait", "2s"}})
	out, err := e.EC2.RunInstances(e.ctx, &ec2.RunInstancesInput{ImageId: aws.String(localenv.AMI), MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance,
			Tags: []ec2types.Tag{{Key: aws.String(fleet.TagStack), Value: &e.Stack}, {Key: aws.String(fleet.TagPool), Value: &e.Pool}}}}})
	require.NoError(t, err)
	id := aws.ToString(out.Instances[0].InstanceId)
	e.waitTerminated(id, 30*time.Second)
	require.Contains(t, e.Sim.AgentLog(id), "an orphan")
}

// TestStartedFromStoppedSkipsInit: a warm instance that is stopped and started again (the
// stopped part of a warm pool, claimed) goes straight to the reuse loop: the pre-runner script
// ran once for the spec, not again. What an earlier agent left of a run is removed at start.
func TestStartedFromStoppedSkipsInit(t *testing.T) {
	t.Parallel()
	counter, err := os.CreateTemp("", "hangar-prerunner-")
	require.NoError(t, err)
	require.NoError(t, counter.Close())
	t.Cleanup(func() { _ = os.Remove(counter.Name()) })
	e := newEnv(t, envOptions{Baked: true, PreRunner: "echo ran >> " + counter.Name()})
	id := e.launch(time.Time{})
	e.warm(id)

	_, err = e.EC2.StopInstances(e.ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.Sim.AgentPID(id) == 0 }, time.Minute, 50*time.Millisecond, "the agent stops with its machine")
	// What an agent stopped mid-run (or crashed) would leave: the run's directory, a file in the
	// runner user's home and one in /tmp.
	user := e.Sim.RunnerUser(id)
	u, err := osuser.Lookup(user)
	require.NoError(t, err)
	uid, _ := strconv.Atoi(u.Uid)
	leftRun := filepath.Join(e.Sim.RunsDir(id), "2299-1", "work")
	require.NoError(t, os.MkdirAll(leftRun, 0o755))
	leftTmp := filepath.Join(os.TempDir(), "left-by-"+strings.TrimPrefix(id, "i-"))
	leftHome := filepath.Join(u.HomeDir, "left-behind")
	for _, f := range []string{filepath.Join(leftRun, "secret"), leftTmp, leftHome} {
		require.NoError(t, os.WriteFile(f, []byte("x"), 0o644))
		require.NoError(t, os.Lchown(f, uid, uid))
	}
	_, err = e.EC2.StartInstances(e.ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.Sim.AgentPID(id) != 0 }, time.Minute, 50*time.Millisecond, "the agent starts with its machine")

	claimed := e.claim(e.must(e.Store.Get(e.ctx, id)), "2301")
	e.waitSignal(id, state.SignalRegistered, "2301", claimed.Version)
	b, err := os.ReadFile(counter.Name())
	require.NoError(t, err)
	require.Equal(t, "ran\n", string(b), "the pre-runner script ran once, not on the second start")
	require.Contains(t, e.Sim.AgentLog(id), "initialised before for this spec")
	for _, f := range []string{filepath.Join(e.Sim.RunsDir(id), "2299-1"), leftTmp, leftHome} {
		_, err := os.Lstat(f)
		require.True(t, os.IsNotExist(err), "%s, left before the restart, is still there", f)
	}
}

// TestGivenBackBeforeItsToken: a claim whose registration token never reaches the doorbell is
// given back (a release) while the agent waits for it. The agent's ask is refused (the item moved
// on), the run is ended on the instance, and the agent signals the run's DEREGISTERED, which is
// what release waits for before it offers the instance; no runner is registered. The instance
// then serves the next claim.
func TestGivenBackBeforeItsToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{Baked: true})
	id := e.launch(time.Time{})
	in := e.warm(id)

	claimed := e.transition(state.Change{InstanceID: id, From: in.State, To: state.Claimed, Version: in.Version,
		Assign: &state.Assignment{RunID: "2401", RunAttempt: 1, Repo: repo, RunnerURL: e.RunnerURL(), RunnerPrefix: e.RunnerNames().Prefix()}})
	require.NoError(t, e.Ring(e.ctx, claimed)) // rung, but no token handed over
	acked, err := e.WaitItem(e.ctx, id, 30*time.Second, "the claim acknowledged", func(it *state.Instance) bool {
		return it.AckVersion >= claimed.Version
	})
	require.NoError(t, err)
	back := e.release(acked)
	got := e.waitSignal(id, state.SignalDeregistered, "2401", back.Version)
	require.Equal(t, state.Idle, got.State)
	require.Empty(t, e.GH.Runners(""), "no runner registered")

	again := e.claim(e.must(e.Store.Get(e.ctx, id)), "2402")
	e.waitSignal(id, state.SignalRegistered, "2402", again.Version)
	require.Len(t, e.GH.Runners(repo), 1)
}
