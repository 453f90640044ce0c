package agent

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
)

// The reuse loop's world on fakes: one agent, its item in a fake.Store (through fake.AgentStore),
// its doorbell on a fake.SQS, a fakeHost for the machine, fake instance metadata, and a shutdown
// command that leaves a file. No root, no emulator: what isolates runs on a real host is package
// host's, tested there and end to end (e2e_test.go, contain_test.go, hostile_test.go).

const (
	worldRepo      = "octo/app"
	worldInstance  = "i-0123456789abcdef0"
	worldGitHubURL = "https://github.com"
)

// worldOptions shape a world.
type worldOptions struct {
	Baked     bool   // a runner in the runner directory, as an image bakes it
	PreRunner string // the pool's pre-runner script
	// Runner changes the pool's runner release (where it is downloaded from, its checksums).
	Runner func(*pooldoc.Runner)
	// NoItem launches no item: the instance is an orphan.
	NoItem bool
	// Deadline is the item's threshold (ten minutes out when zero).
	Deadline time.Time
	// Config changes the agent's configuration.
	Config func(*Config)
	// FastForward makes the agent's waits pass at once, moving its clock by their length, until
	// its clock has moved this far from the start.
	FastForward time.Duration
}

// world is one agent on fakes; every step fails the test instead of returning an error.
type world struct {
	t        *testing.T
	ctx      context.Context
	id       string
	doc      *pooldoc.Document
	store    *fake.Store
	view     *cuttable
	sqs      *fake.SQS
	bells    *doorbell.Bells
	host     *fakeHost
	md       *spotMetadata
	clock    *testClock
	agent    *Agent
	logs     *testbed.Buffer
	poweroff string
	done     chan error // Run's result

	mu       sync.Mutex
	handed   map[int64]string // the registration token handed over for each claim, by version
	answered map[int64]int    // the asks answered, by version
}

func newWorld(t *testing.T, o worldOptions) *world {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	dir := t.TempDir()
	doc := fake.Pool(t, "linux", nil)
	if o.Runner != nil {
		o.Runner(&doc.Runner)
	}
	doc.Runner.PreRunnerScript = o.PreRunner
	w := &world{t: t, ctx: ctx, id: worldInstance, doc: doc, store: fake.NewStore(fake.Account), sqs: &fake.SQS{},
		host: newFakeHost(), md: &spotMetadata{}, clock: &testClock{}, logs: &testbed.Buffer{},
		poweroff: filepath.Join(dir, "poweroff"), done: make(chan error, 1), handed: map[int64]string{}, answered: map[int64]int{}}
	w.view = &cuttable{AgentStore: &fake.AgentStore{Store: w.store, ID: w.id}, clock: w.clock}
	w.bells = &doorbell.Bells{SQS: w.sqs, Stack: fake.Stack, Base: fake.QueueURLBase}
	cfg := Config{
		Identity:  Identity{InstanceID: w.id, Region: "us-east-1", Account: fake.Account.ID, Partition: "aws", Arch: "x64"},
		Pool:      doc,
		RunnerDir: filepath.Join(dir, "runner"), RunsDir: filepath.Join(dir, "runs"), StateDir: filepath.Join(dir, "state"),
		PollInterval: 250 * time.Millisecond, SpotInterval: 250 * time.Millisecond, SafetyInterval: time.Second,
		ShutdownCommand: []string{"touch", w.poweroff},
	}
	if o.Config != nil {
		o.Config(&cfg)
	}
	if o.Baked {
		require.NoError(t, os.MkdirAll(cfg.RunnerDir, 0o755))
		for _, f := range []string{"config.sh", "run.sh"} {
			require.NoError(t, os.WriteFile(filepath.Join(cfg.RunnerDir, f), []byte("#!/bin/sh\n"), 0o755))
		}
	}
	if !o.NoItem {
		w.launch(o.Deadline)
	}
	a, err := New(cfg, w.view, w.host, refusingEC2{}, w.md, slog.New(slog.NewTextHandler(w.logs, nil)))
	require.NoError(t, err)
	a.Now, a.Clock = w.clock.Now, w.clock
	a.Doorbell = w.sqs
	if o.FastForward > 0 {
		w.clock.FastForward(o.FastForward)
	}
	w.agent = a
	go func() { w.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-w.done:
		case <-time.After(time.Minute):
			t.Error("the agent did not stop within a minute of its context ending")
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", w.logs.String())
		}
	})
	return w
}

// launch writes the instance's item (created, no run), as refresh does for a warm pool.
func (w *world) launch(deadline time.Time) {
	w.t.Helper()
	if deadline.IsZero() {
		deadline = time.Now().Add(10 * time.Minute)
	}
	require.NoError(w.t, w.store.Create(w.ctx, []*state.Instance{{ID: w.id, Pool: w.doc.Name, Threshold: deadline, Bell: w.bells.URL(w.id),
		Spec: state.Spec{InstanceType: "c7i.large", UsageClass: state.UsageOnDemand, AZ: "us-east-1a", VCPU: 2, MemoryMiB: 4096}}}))
}

// waitItem waits until cond holds for the item, answering the agent's asks for a hand-over
// meanwhile as provision does.
func (w *world) waitItem(what string, within time.Duration, cond func(*state.Instance) bool) *state.Instance {
	w.t.Helper()
	var last *state.Instance
	require.Eventually(w.t, func() bool {
		last = w.store.Item(w.id)
		if last == nil {
			return false
		}
		if cond(last) {
			return true
		}
		w.answerAsk(last)
		return false
	}, within, 10*time.Millisecond, "%s: not within %s; item: %+v", what, within, last)
	return last
}

// waitSignal waits for a signal about run, written for minVersion or later.
func (w *world) waitSignal(name state.SignalName, run string, minVersion int64) *state.Instance {
	w.t.Helper()
	return w.waitItem(fmt.Sprintf("signal %s for run %q", name, run), 30*time.Second, func(in *state.Instance) bool {
		return in.SignalFor(name, run, minVersion)
	})
}

// transition applies a change in the pool (a deadline ten minutes out unless given).
func (w *world) transition(c state.Change) *state.Instance {
	w.t.Helper()
	if c.Threshold.IsZero() && c.To != state.Terminated {
		c.Threshold = time.Now().Add(10 * time.Minute)
	}
	c.Pool = w.doc.Name
	in, err := w.store.Transition(w.ctx, c)
	require.NoError(w.t, err)
	return in
}

// ring rings the instance's doorbell, as the control plane does after the writes an agent waits
// for.
func (w *world) ring() {
	w.t.Helper()
	require.NoError(w.t, w.bells.Ring(w.ctx, w.bells.URL(w.id)))
}

// warm waits for READY and moves the instance to idle, as refresh does.
func (w *world) warm() *state.Instance {
	w.t.Helper()
	in := w.waitSignal(state.SignalReady, "", 1)
	return w.transition(state.Change{InstanceID: w.id, From: state.Created, To: state.Idle, Version: in.Version})
}

// assign gives the instance to run at runnerURL, naming token as the hand-over's secret (no
// hand-over yet).
func (w *world) assign(in *state.Instance, run, runnerURL, token string) *state.Instance {
	w.t.Helper()
	home := w.doc.Home() // as provision's claim writes it
	return w.transition(state.Change{InstanceID: w.id, From: in.State, To: state.Claimed, Version: in.Version,
		Assign: &state.Assignment{RunID: run, RunAttempt: 1, Repo: worldRepo, RunnerURL: runnerURL,
			RunnerPrefix: state.RunnerNamesOf(fake.Stack).Prefix(), HandOverSum: state.SecretSum(token)}, Home: &home})
}

// claim gives the instance to run with a fresh registration token handed over, as provision does.
func (w *world) claim(in *state.Instance, run string) *state.Instance {
	w.t.Helper()
	token := "AREG" + rand.Text()
	claimed := w.assign(in, run, worldGitHubURL+"/"+worldRepo, token)
	w.handOver(claimed, token)
	return claimed
}

// delivery is a hand-over of token to the instance's doorbell for the assignment in holds.
func (w *world) delivery(in *state.Instance, token string) doorbell.Delivery {
	return doorbell.Delivery{URL: in.Bell, ARN: fake.Account.ARN(w.id), HandOver: doorbell.HandOver{Run: in.RunID,
		Version: in.Version, Kind: doorbell.KindRegistration, Secret: token}}
}

// handOver sends token to the instance's doorbell for the assignment in holds.
func (w *world) handOver(in *state.Instance, token string) {
	w.t.Helper()
	w.mu.Lock()
	w.handed[in.Version] = token
	w.mu.Unlock()
	require.NoError(w.t, w.bells.HandOver(w.ctx, w.delivery(in, token)))
}

// answerAsk hands the token over again, once per ask, when the agent asked for it, as provision
// does.
func (w *world) answerAsk(in *state.Instance) {
	w.mu.Lock()
	token, ok := w.handed[in.Version]
	ask := in.AskVersion == in.Version && in.Asks > w.answered[in.Version]
	if ok && ask {
		w.answered[in.Version] = in.Asks
	}
	w.mu.Unlock()
	if ok && ask {
		_ = w.bells.HandOver(w.ctx, w.delivery(in, token))
	}
}

// tokens returns every registration token handed over.
func (w *world) tokens() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, tok := range w.handed {
		out = append(out, tok)
	}
	return out
}

// release gives the instance back and rings it, as release does.
func (w *world) release(in *state.Instance) *state.Instance {
	w.t.Helper()
	out := w.transition(state.Change{InstanceID: w.id, From: in.State, To: state.Idle, Version: in.Version, RunID: in.RunID})
	w.ring()
	return out
}

// runnerName is the name the run's runner registers under on this instance.
func (w *world) runnerName(run string) string {
	return state.RunnerNamesOf(fake.Stack).Name(w.id, run)
}

// lookedAt waits until the agent has read the item at version or later.
func (w *world) lookedAt(version int64) {
	w.t.Helper()
	require.Eventually(w.t, func() bool { return w.view.seen.Load() >= version }, 30*time.Second, 10*time.Millisecond,
		"the agent never read version %d of its item", version)
}

// waitPoweredOff waits until the agent has powered its instance off (the shutdown command ran)
// and Run has returned ErrTerminated.
func (w *world) waitPoweredOff(within time.Duration) {
	w.t.Helper()
	select {
	case err := <-w.done:
		require.ErrorIs(w.t, err, ErrTerminated)
		w.done <- err // for the cleanup
	case <-time.After(within):
		w.t.Fatalf("the agent did not terminate its instance within %s", within)
	}
	require.FileExists(w.t, w.poweroff, "the shutdown command ran")
}

// testClock is the agent's clock in a world (Now and wait.Clock): the real time plus an offset the
// test moves. While fast-forwarding, a wait passes at once and moves the offset by its length.
type testClock struct {
	mu        sync.Mutex
	offset    time.Duration
	fastUntil time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Sleep passes d (wait.Clock): at once while fast-forwarding, else in real time.
func (c *testClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	if now := time.Now().Add(c.offset); now.Before(c.fastUntil) {
		c.offset += d
		c.mu.Unlock()
		return ctx.Err()
	}
	c.mu.Unlock()
	return wait.Sleep(ctx, d)
}

// Advance moves the clock d forward.
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// FastForward makes waits pass at once until the clock has moved d from now.
func (c *testClock) FastForward(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fastUntil = time.Now().Add(c.offset + d)
}

// errUnreachable is what every request gets while DynamoDB is cut off.
var errUnreachable = errors.New("dial tcp 127.0.0.1:8000: connect: connection refused")

// cuttable is the agent's store, cut off from it while the test clock is before until (an
// outage); it remembers the latest version of the item the agent read.
type cuttable struct {
	*fake.AgentStore
	clock  *testClock
	mu     sync.Mutex
	until  time.Time
	failed atomic.Int64 // reads refused by the outage
	seen   atomic.Int64
}

// cut refuses every request until the test clock reaches until.
func (c *cuttable) cut(until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.until = until
}

func (c *cuttable) down() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clock.Now().Before(c.until)
}

func (c *cuttable) saw(in *state.Instance, err error) (*state.Instance, error) {
	for err == nil {
		v := c.seen.Load()
		if in.Version <= v || c.seen.CompareAndSwap(v, in.Version) {
			break
		}
	}
	return in, err
}

func (c *cuttable) Get(ctx context.Context) (*state.Instance, error) {
	if c.down() {
		c.failed.Add(1)
		return nil, errUnreachable
	}
	return c.saw(c.AgentStore.Get(ctx))
}

func (c *cuttable) Heartbeat(ctx context.Context, at time.Time) (*state.Instance, error) {
	if c.down() {
		return nil, errUnreachable
	}
	return c.saw(c.AgentStore.Heartbeat(ctx, at))
}

func (c *cuttable) AckRead(ctx context.Context, run string, version int64, at time.Time) (*state.Instance, error) {
	if c.down() {
		return nil, errUnreachable
	}
	return c.saw(c.AgentStore.AckRead(ctx, run, version, at))
}

func (c *cuttable) Signal(ctx context.Context, sig state.Signal) error {
	if c.down() {
		return errUnreachable
	}
	return c.AgentStore.Signal(ctx, sig)
}

func (c *cuttable) Ack(ctx context.Context, version int64, at time.Time) error {
	if c.down() {
		return errUnreachable
	}
	return c.AgentStore.Ack(ctx, version, at)
}

func (c *cuttable) Ask(ctx context.Context, version int64, n int, at time.Time) error {
	if c.down() {
		return errUnreachable
	}
	return c.AgentStore.Ask(ctx, version, n, at)
}

// fakeHost is the machine as the reuse loop sees it: it records what the agent asks of it, keeps
// the runners registered with GitHub, and runs runners that live until stopped.
type fakeHost struct {
	mu         sync.Mutex
	inits      int
	hardened   []string
	scrubbed   [][]string
	configured []configureCall
	// registered are the runners registered with GitHub, by name; release deletes them there,
	// Scrub only the files that hold them on the instance.
	registered []string
	runs       map[string]*fakeRun // by directory
	// refuse makes config.sh fail as when GitHub refuses the token: its output shows the token,
	// which the agent must not report.
	refuse bool
}

// configureCall is one registration the agent asked for.
type configureCall struct {
	url, token, name, group string
	labels                  []string
}

func newFakeHost() *fakeHost { return &fakeHost{runs: map[string]*fakeRun{}} }

func (h *fakeHost) Init(context.Context) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inits++
	return "", nil
}

func (h *fakeHost) Scrub(_ context.Context, trees ...string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.scrubbed = append(h.scrubbed, trees)
	for _, t := range trees {
		delete(h.runs, t)
	}
	return nil
}

func (h *fakeHost) HardenInstall(dir string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hardened = append(h.hardened, dir)
	return nil
}

func (h *fakeHost) OpenRun(dir string) (Run, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.runs[dir]
	if !ok {
		r = &fakeRun{h: h, dir: dir}
		h.runs[dir] = r
	}
	return r, nil
}

// registrations returns the runners registered with GitHub.
func (h *fakeHost) registrations() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.registered)
}

// configures returns the registrations the agent asked for.
func (h *fakeHost) configures() []configureCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.configured)
}

// initCount returns how many times Init ran.
func (h *fakeHost) initCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inits
}

// hardenedDirs returns the installs made root's and read-only.
func (h *fakeHost) hardenedDirs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.hardened)
}

// wasScrubbed reports whether a scrub removed dir.
func (h *fakeHost) wasScrubbed(dir string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.ContainsFunc(h.scrubbed, func(trees []string) bool { return slices.Contains(trees, dir) })
}

func (h *fakeHost) setRefuse(refuse bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refuse = refuse
}

// fakeRun is one run on the fakeHost.
type fakeRun struct {
	h      *fakeHost
	dir    string
	name   string      // the registration its runner files hold
	exited func(error) // the running runner's, until it stops
}

func (r *fakeRun) Registered(name string) bool {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	return r.name != "" && r.name == name
}

func (r *fakeRun) Make(string) error {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	r.name = "" // made anew
	return nil
}

func (r *fakeRun) Configure(_ context.Context, url, token, name, group string, labels []string, out io.Writer) error {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	r.h.configured = append(r.h.configured, configureCall{url: url, token: token, name: name, group: group, labels: slices.Clone(labels)})
	if r.h.refuse {
		_, _ = fmt.Fprintf(out, "Connecting with token %s\nhttp response code: NotFound from 'POST %s' (registration refused)\n", token, url)
		return errors.New("config.sh: exit status 1")
	}
	r.name = name
	r.h.registered = append(r.h.registered, name)
	_, _ = fmt.Fprintln(out, "runner registered as", name)
	return nil
}

func (r *fakeRun) Start(_, _, _ string, _ io.Writer, exited func(error)) error {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	r.exited = exited
	return nil
}

func (r *fakeRun) Stop(time.Duration) error {
	r.h.mu.Lock()
	exited := r.exited
	r.exited = nil
	r.h.mu.Unlock()
	if exited != nil {
		exited(errors.New("signal: interrupt"))
	}
	return nil
}

func (r *fakeRun) Strays() ([]string, error) { return nil, nil }

func (r *fakeRun) Close() {}

// spotMetadata is the instance metadata service: a spot interruption notice once notice is set.
type spotMetadata struct {
	Metadata
	notice atomic.Pointer[string]
}

// notFound is the metadata service's 404, for a path it does not have.
type notFound struct{}

func (notFound) Error() string       { return "metadata: 404 Not Found" }
func (notFound) HTTPStatusCode() int { return 404 }

func (f *spotMetadata) GetMetadata(_ context.Context, in *imds.GetMetadataInput, _ ...func(*imds.Options)) (*imds.GetMetadataOutput, error) {
	if n := f.notice.Load(); n != nil && in.Path == "spot/instance-action" {
		return &imds.GetMetadataOutput{Content: io.NopCloser(strings.NewReader(*n))}, nil
	}
	return nil, notFound{}
}

// refusingEC2 refuses to terminate: the agent ends its instance with its shutdown command.
type refusingEC2 struct{}

func (refusingEC2) TerminateInstances(context.Context, *ec2.TerminateInstancesInput, ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error) {
	return nil, errors.New("UnauthorizedOperation: the instance role may not terminate instances")
}
