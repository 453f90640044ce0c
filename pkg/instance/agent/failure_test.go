package agent

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestRegistrationFailure: GitHub refuses the token; the agent signals REGISTER_FAILED with the
// log tail, registers nothing, and serves the next assignment once one can succeed.
func TestRegistrationFailure(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{Baked: true})
	in := w.warm()

	w.host.setRefuse(true)
	claimed := w.claim(in, "2001")
	failed := w.waitSignal(state.SignalRegisterFailed, "2001", claimed.Version)
	require.Contains(t, failed.SignalLog, "registration refused", "the runner's own output is in the log tail")
	require.Contains(t, failed.SignalLog, "hangar-agent: config.sh")
	for _, secret := range w.tokens() {
		require.NotContains(t, failed.SignalLog, secret, "the token never lands in the log")
	}
	require.NotEmpty(t, w.tokens())
	require.Len(t, w.host.configures(), 1, "config.sh ran, with the token handed over")
	require.Equal(t, w.tokens()[0], w.host.configures()[0].token)
	require.Empty(t, w.host.registrations())
	require.True(t, w.host.wasScrubbed(w.agent.runDir("2001", 1)), "what the attempt left is removed")

	// Provision gives it back (claimed → idle) and another run claims it.
	w.host.setRefuse(false)
	back := w.transition(state.Change{InstanceID: w.id, From: state.Claimed, To: state.Idle, Version: failed.Version, RunID: "2001"})
	again := w.claim(back, "2002")
	w.waitSignal(state.SignalRegistered, "2002", again.Version)
	require.Equal(t, []string{w.runnerName("2002")}, w.host.registrations())
}

// TestPreRunnerFailure: the pool's pre-runner script fails; the agent signals FAILED with the
// script's output, and takes no work.
func TestPreRunnerFailure(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{PreRunner: "echo installing tools; echo 'E: package jq not found' >&2; exit 3"})
	failed := w.waitSignal(state.SignalFailed, "", 1)
	require.Contains(t, failed.SignalLog, "installing tools")
	require.Contains(t, failed.SignalLog, "E: package jq not found")
	require.Contains(t, failed.SignalLog, "exit status 3")

	idle := w.transition(state.Change{InstanceID: w.id, From: state.Created, To: state.Idle, Version: failed.Version})
	claimed := w.claim(idle, "2101")
	w.ring()
	w.lookedAt(claimed.Version)
	got := w.store.Item(w.id)
	require.False(t, got.SignalFor(state.SignalRegistered, "2101", claimed.Version), "a failed instance never serves")
	require.Less(t, got.AckVersion, claimed.Version, "nor acknowledges a claim")
	require.Empty(t, w.host.configures())
	require.Empty(t, w.host.registrations())
}

// TestChecksumMismatch: the downloaded runner does not match the published SHA-256; the agent
// signals FAILED and never runs it.
func TestChecksumMismatch(t *testing.T) {
	t.Parallel()
	tarball := tarball(t, tar.Header{Name: "config.sh", Typeflag: tar.TypeReg, Mode: 0o755},
		tar.Header{Name: "run.sh", Typeflag: tar.TypeReg, Mode: 0o755})
	sum := sha256.Sum256(tarball)
	tarSum := hex.EncodeToString(sum[:])
	downloads := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(tarball) }))
	t.Cleanup(downloads.Close)
	w := newWorld(t, worldOptions{Runner: func(r *pooldoc.Runner) {
		r.BaseURL = downloads.URL
		r.SHA256 = map[string]string{"x64": strings.Repeat("0", 64)}
	}})
	failed := w.waitSignal(state.SignalFailed, "", 1)
	require.Contains(t, failed.SignalLog, "runner checksum mismatch")
	require.Contains(t, failed.SignalLog, tarSum, "the log names the checksum it got")
	require.NoFileExists(t, filepath.Join(w.agent.cfg.RunnerDir, "config.sh"), "nothing unpacked")
	require.Empty(t, w.host.hardenedDirs(), "nor made the install")
}

// TestDynamoDBUnreachableThenBack: with DynamoDB cut off the agent backs off (no hot loop) and
// keeps going; when it is back, the agent serves the next claim. The agent's clock runs ahead
// through the outage, so that the test does not wait its backoff out.
func TestDynamoDBUnreachableThenBack(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{Baked: true})
	in := w.warm()

	const outage = 6 * time.Second
	end := w.clock.Now().Add(outage)
	w.clock.FastForward(outage)
	w.view.cut(end)
	require.Eventually(t, func() bool { return w.view.failed.Load() > 0 }, 30*time.Second, 10*time.Millisecond, "a read during the outage")
	before := w.store.Item(w.id) // the agent's reads and writes are one at a time: none is under way now
	require.Eventually(t, func() bool { return !w.clock.Now().Before(end) }, 30*time.Second, 10*time.Millisecond,
		"the agent's clock ran through the outage")
	during := w.view.failed.Load()
	require.Positive(t, during, "the agent tried to read its item")
	require.LessOrEqual(t, during, int64(6), "backing off from twice the poll interval to 5 s: no hot loop in %s", outage)
	require.Equal(t, before.HeartbeatAt, w.store.Item(w.id).HeartbeatAt, "cut off: no request got through")
	require.Contains(t, w.logs.String(), "cannot read own item; keeping the last deadline")

	claimed := w.claim(in, "2201")
	w.waitSignal(state.SignalRegistered, "2201", claimed.Version)
	require.Contains(t, w.logs.String(), "own item readable again")
	warnings := strings.Count(w.logs.String(), "cannot read own item")
	require.LessOrEqual(t, warnings, 5, "outage warnings are rate-limited (1, 2, 4, … failures)")
}

// TestSelfTerminationWithDynamoDBDown: past its deadline, with DynamoDB unreachable, the agent
// terminates its own instance.
func TestSelfTerminationWithDynamoDBDown(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{Baked: true, Deadline: time.Now().Add(20 * time.Second),
		Config: func(c *Config) { c.TerminateGrace = time.Second }})
	w.waitSignal(state.SignalReady, "", 1) // the agent has read its deadline
	w.view.cut(time.Now().Add(time.Hour))
	w.clock.Advance(30 * time.Second) // past the deadline by more than the grace

	w.waitPoweredOff(time.Minute)
	require.Contains(t, w.logs.String(), "past its deadline")
}

// TestSpotNotice: a spot interruption notice makes the agent signal SPOT_INTERRUPTED and take no
// new work.
func TestSpotNotice(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{Baked: true})
	in := w.warm()

	notice := `{"action": "terminate", "time": "2030-01-01T00:02:00Z"}`
	w.md.notice.Store(&notice)
	spot := w.waitSignal(state.SignalSpotInterrupted, "", in.Version)
	require.Contains(t, spot.SignalLog, "terminate", "the notice is recorded")

	claimed := w.claim(spot, "2301")
	w.lookedAt(claimed.Version)
	got := w.store.Item(w.id)
	require.False(t, got.SignalFor(state.SignalRegistered, "2301", claimed.Version), "an interrupted instance takes no new run")
	require.Less(t, got.AckVersion, claimed.Version, "nor acknowledges it")
	require.Empty(t, w.host.configures())
	require.Empty(t, w.host.registrations())
}

// TestTerminatedItemEndsInstance: when the control plane marks the item terminated, the agent
// terminates the instance at once (refresh's own EC2 call may have failed).
func TestTerminatedItemEndsInstance(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{Baked: true})
	in := w.warm()
	w.transition(state.Change{InstanceID: w.id, From: state.Idle, To: state.Terminated, Version: in.Version})
	w.waitPoweredOff(20 * time.Second)
	require.Contains(t, w.logs.String(), "the control plane marked this instance terminated")
}

// TestOrphanWithoutItem: an instance whose item never appears terminates itself after the boot
// wait (run through on the agent's clock).
func TestOrphanWithoutItem(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{Baked: true, NoItem: true, FastForward: time.Minute,
		Config: func(c *Config) { c.BootWait = 2 * time.Second }})
	w.waitPoweredOff(30 * time.Second)
	require.Contains(t, w.logs.String(), "an orphan")
	require.Zero(t, w.host.initCount(), "an orphan readies nothing")
}

// TestLeftoversScrubbedAtStart: what an earlier agent left of a run it no longer holds
// is ended at start, before READY: the host scrubs the run's directory.
func TestLeftoversScrubbedAtStart(t *testing.T) {
	t.Parallel()
	runs := t.TempDir()
	left := filepath.Join(runs, "2299-1")
	require.NoError(t, os.MkdirAll(filepath.Join(left, "work"), 0o755))
	w := newWorld(t, worldOptions{Baked: true, Config: func(c *Config) { c.RunsDir = runs }})
	w.waitSignal(state.SignalReady, "", 1)
	require.True(t, w.host.wasScrubbed(left), "the run left behind is scrubbed at start")
	require.Contains(t, w.logs.String(), "runs left by an earlier agent; removing them")
}

// TestGivenBackBeforeItsToken: a claim whose registration token never reaches the doorbell is
// given back (a release) while the agent waits for it. The agent's ask is refused (the item moved
// on), the run is ended on the instance, and the agent signals the run's DEREGISTERED, which is
// what release waits for before it offers the instance; no runner is registered. The instance
// then serves the next claim.
func TestGivenBackBeforeItsToken(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{Baked: true})
	in := w.warm()

	claimed := w.assign(in, "2401", worldGitHubURL+"/"+worldRepo, "AREGNEVERHANDED")
	w.ring() // rung, but no token handed over
	acked := w.waitItem("the claim acknowledged", 30*time.Second, func(it *state.Instance) bool {
		return it.AckVersion >= claimed.Version
	})
	back := w.release(acked)
	got := w.waitSignal(state.SignalDeregistered, "2401", back.Version)
	require.Equal(t, state.Idle, got.State)
	require.Empty(t, w.host.configures(), "no runner registered")
	require.Empty(t, w.host.registrations(), "no runner registered")
	require.True(t, w.host.wasScrubbed(w.agent.runDir("2401", 1)), "the run is ended on the instance")

	again := w.claim(w.store.Item(w.id), "2402")
	w.waitSignal(state.SignalRegistered, "2402", again.Version)
	require.Equal(t, []string{w.runnerName("2402")}, w.host.registrations())
}
