package stress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/lambdaemu"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// The step binaries the suite drives Hangar through, as the action runs them.
const (
	provisionPkg = "github.com/hangar-ci/hangar/cmd/provision"
	releasePkg   = "github.com/hangar-ci/hangar/cmd/release"
	refreshPkg   = "github.com/hangar-ci/hangar/cmd/refresh" // the refresh function's bootstrap
	hangarPkg    = "github.com/hangar-ci/hangar/cmd/hangar"  // the refresh step: hangar refresh
)

// world is one test's local Hangar: the emulators' stack, the GitHub stand-in and real agents
// (localenv), and the step binaries.
type world struct {
	*localenv.Env
	ctx context.Context

	provisionBin, releaseBin, refreshBin, hangarBin string
	fn                                              *lambdaemu.Emulator // the refresh function, when served
	dir                                             string              // the steps' working directories
	steps                                           atomic.Int64
}

// worldOptions shape a world.
type worldOptions struct {
	// AgentArgs are extra agent flags (after --poll-interval 250ms).
	AgentArgs []string
	// Timeouts replace the pool's state timeouts (zero fields keep the defaults).
	Timeouts pooldoc.Timeouts
	// Refresh serves the stack's refresh function, for the refresh step.
	Refresh bool
	// Budget bounds the whole test (default 10 minutes).
	Budget time.Duration
}

// newWorld starts a world for t; it is closed when t ends. On failure the agents' log tails and
// the refresh function's log are written to the test log.
func newWorld(t *testing.T, name string, o worldOptions) *world {
	t.Helper()
	if o.Budget == 0 {
		o.Budget = 10 * time.Minute
	}
	// Building the binaries can take minutes on a busy machine with a cold cache: the world's
	// budget starts after them.
	w := &world{dir: t.TempDir(), provisionBin: testbuild.Binary(t, provisionPkg), releaseBin: testbuild.Binary(t, releasePkg),
		refreshBin: testbuild.Binary(t, refreshPkg), hangarBin: testbuild.Binary(t, hangarPkg)}
	ctx, cancel := context.WithTimeout(context.Background(), o.Budget)
	t.Cleanup(cancel)
	w.ctx = ctx
	le, err := localenv.Start(ctx, localenv.Options{Stack: testbed.Name(t, name), Baked: true,
		AgentArgs: append([]string{"--poll-interval", "250ms"}, o.AgentArgs...)})
	require.NoError(t, err)
	w.Env = le
	t.Cleanup(func() {
		if t.Failed() {
			for _, id := range le.Sim.Running() {
				t.Logf("agent log of %s (tail):\n%s", id, tail(le.Sim.AgentLog(id), 3000))
			}
			if w.fn != nil {
				t.Logf("refresh function log (tail):\n%s", tail(w.fn.Logs(), 6000))
			}
		}
		le.Close()
		w.terminateAll()
	})
	if o.Timeouts != (pooldoc.Timeouts{}) {
		require.NoError(t, le.UpdatePool(ctx, func(d *pooldoc.Document) {
			for _, f := range []struct{ to, from *pooldoc.Duration }{{&d.Timeouts.Created, &o.Timeouts.Created},
				{&d.Timeouts.Claimed, &o.Timeouts.Claimed}, {&d.Timeouts.Running, &o.Timeouts.Running},
				{&d.Timeouts.Idle, &o.Timeouts.Idle}, {&d.Timeouts.Stopped, &o.Timeouts.Stopped}} {
				if *f.from != 0 {
					*f.to = *f.from
				}
			}
		}))
	}
	if o.Refresh {
		w.fn, err = le.ServeRefresh(w.refreshBin)
		require.NoError(t, err)
	}
	return w
}

// terminateAll terminates what the world leaves running in the EC2 emulator once its simulator
// has stopped: every instance left there slows down every later DescribeInstances of every test
// on the machine.
func (w *world) terminateAll() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	insts, err := w.ec2Instances(ctx)
	if err != nil {
		return
	}
	var ids []string
	for id, x := range insts {
		if !ending(x.state) {
			ids = append(ids, id)
		}
	}
	for chunk := range slices.Chunk(ids, 500) {
		_, _ = w.EC2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: chunk})
	}
}

// stepDir is a fresh working directory for one step (its outputs and summary). Safe from any
// goroutine: should it not be made, the step's outputs are missing and its caller fails.
func (w *world) stepDir() string {
	d := filepath.Join(w.dir, "step-"+strconv.FormatInt(w.steps.Add(1), 10))
	_ = os.MkdirAll(d, 0o755)
	return d
}

// stepEnv is the environment of a step for run, with extra variables last (later ones win).
func (w *world) stepEnv(run string, count int, extra ...string) ([]string, string) {
	dir := w.stepDir()
	return append(w.StepEnv(run, count, dir), extra...), dir
}

// provision runs the provision step for n instances for run and returns what it reported, and
// the instance ids it gave (nil when it failed).
func (w *world) provision(ctx context.Context, run string, n int, extra ...string) (localenv.StepResult, []string, error) {
	env, dir := w.stepEnv(run, n, extra...)
	res, err := localenv.RunStep(ctx, w.provisionBin, env, dir)
	if err != nil {
		return res, nil, err
	}
	ids, err := instanceIDs(res)
	return res, ids, err
}

// release runs the release step for run.
func (w *world) release(ctx context.Context, run string, extra ...string) (localenv.StepResult, error) {
	env, dir := w.stepEnv(run, 1, extra...)
	return localenv.RunStep(ctx, w.releaseBin, env, dir)
}

// refresh runs the refresh step (hangar refresh) once against the served refresh function.
func (w *world) refresh(ctx context.Context) (localenv.StepResult, error) {
	if w.fn == nil {
		return localenv.StepResult{}, errors.New("the world serves no refresh function (worldOptions.Refresh)")
	}
	env, dir := w.stepEnv("1", 1)
	res, err := localenv.RunRefreshStep(ctx, w.hangarBin, env, dir)
	if err != nil {
		return res, fmt.Errorf("%w\nrefresh function log (tail):\n%s", err, tail(w.fn.Logs(), 3000))
	}
	return res, nil
}

// instanceIDs reads provision's instance-ids output.
func instanceIDs(res localenv.StepResult) ([]string, error) {
	var ids []string
	if err := json.Unmarshal([]byte(res.Outputs["instance-ids"]), &ids); err != nil {
		return nil, fmt.Errorf("provision's instance-ids output %q: %w\n%s", res.Outputs["instance-ids"], err, tail(res.Log, 3000))
	}
	return ids, nil
}

// fill makes the pool hold at least n idle instances: a provision of n for run (it claims the
// idle instances the pool offers and launches the rest; asking for only the missing ones would
// claim offered ones and launch nothing), then its release. It returns the idle instances.
func (w *world) fill(t *testing.T, run string, n int) []state.Instance {
	t.Helper()
	idle := w.inState(t, state.Idle)
	if missing := n - len(idle); missing > 0 {
		start := time.Now()
		ctx, cancel := context.WithTimeout(w.ctx, 5*time.Minute)
		defer cancel()
		res, ids, err := w.provision(ctx, run, n, "HANGAR_REGISTRATION_TIMEOUT=4m")
		require.NoError(t, err, "fill the pool: %d instances, %d of them missing", n, missing)
		require.Len(t, ids, n, "%s", res.Log)
		_, err = w.release(ctx, run)
		require.NoError(t, err)
		require.NoError(t, localenv.Eventually(ctx, time.Minute, fmt.Sprintf("%d idle instances", n), func(ctx context.Context) (bool, error) {
			var err error
			idle, err = w.Store.InPoolState(ctx, w.Pool, state.Idle)
			return len(idle) >= n, err
		}))
		t.Logf("pool filled to %d idle instances in %s", len(idle), since(start))
	}
	return idle
}

// inState returns the pool's items in a state.
func (w *world) inState(t *testing.T, st state.State) []state.Instance {
	t.Helper()
	out, err := w.Store.InPoolState(w.ctx, w.Pool, st)
	require.NoError(t, err)
	return out
}

// ec2Instance is what the suite reads of an EC2 instance: its state, and the run it was launched
// for (the hangar:run-id tag; a reused instance keeps its first run's).
type ec2Instance struct {
	state ec2types.InstanceStateName
	run   string
}

// ec2Instances returns the stack's EC2 instances (by the stack tag), narrowed by filters.
func (w *world) ec2Instances(ctx context.Context, filters ...ec2types.Filter) (map[string]ec2Instance, error) {
	p := ec2.NewDescribeInstancesPaginator(w.EC2, &ec2.DescribeInstancesInput{Filters: append([]ec2types.Filter{
		{Name: aws.String("tag:" + fleet.TagStack), Values: []string{w.Stack}}}, filters...)})
	out := map[string]ec2Instance{}
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Reservations {
			for _, in := range r.Instances {
				x := ec2Instance{state: in.State.Name}
				for _, tag := range in.Tags {
					if aws.ToString(tag.Key) == fleet.TagRunID {
						x.run = aws.ToString(tag.Value)
					}
				}
				out[aws.ToString(in.InstanceId)] = x
			}
		}
	}
	return out, nil
}

// launchedFor returns the EC2 instances launched for run (the hangar:run-id tag).
func (w *world) launchedFor(ctx context.Context, run string) (map[string]ec2Instance, error) {
	return w.ec2Instances(ctx, ec2types.Filter{Name: aws.String("tag:" + fleet.TagRunID), Values: []string{run}})
}

// live reports whether an EC2 state is one an instance still runs (or will) in.
func live(s ec2types.InstanceStateName) bool {
	return s == ec2types.InstanceStateNamePending || s == ec2types.InstanceStateNameRunning
}

// ending reports whether an EC2 state is terminated or on its way there.
func ending(s ec2types.InstanceStateName) bool {
	return s == ec2types.InstanceStateNameShuttingDown || s == ec2types.InstanceStateNameTerminated
}

// items reads the items of ids (missing ones are absent from the map).
func (w *world) items(ctx context.Context, ids []string) (map[string]*state.Instance, error) {
	if len(ids) == 0 {
		return map[string]*state.Instance{}, nil
	}
	return w.Store.GetMany(ctx, ids)
}

// heldBy returns what still holds run: its live items (the byRun index), instances launched
// for it that EC2 runs while their item is neither idle nor another run's, and its runners. Apart,
// it returns the instances launched for run that EC2 runs without any item: a provision killed
// between its fleet request and writing the items leaves those, which no release can find (their
// agents end them at their boot wait, refresh past its orphan grace).
func (w *world) heldBy(ctx context.Context, run string) (held, orphans []string, err error) {
	return w.heldByRuns(ctx, []string{run})
}

// heldByRuns is heldBy for several runs at once, with one look at EC2.
func (w *world) heldByRuns(ctx context.Context, runs []string) (held, orphans []string, err error) {
	for _, run := range runs {
		byRun, err := w.Store.ByRun(ctx, run)
		if err != nil {
			return nil, nil, err
		}
		for _, in := range byRun {
			if in.State != state.Terminated {
				held = append(held, fmt.Sprintf("%s is %s for run %s (version %d, %q)", in.ID, in.State, run, in.Version, in.StateReason))
			}
		}
	}
	launched, err := w.ec2Instances(ctx, ec2types.Filter{Name: aws.String("tag:" + fleet.TagRunID), Values: runs})
	if err != nil {
		return nil, nil, err
	}
	var running []string
	for id, st := range launched {
		if live(st.state) {
			running = append(running, id)
		}
	}
	its, err := w.items(ctx, running)
	if err != nil {
		return nil, nil, err
	}
	for _, id := range running {
		it, ok := its[id]
		run := launched[id].run
		switch {
		case !ok:
			orphans = append(orphans, fmt.Sprintf("%s, launched for run %s, runs on EC2 without an item", id, run))
		case it.State == state.Terminated:
			held = append(held, fmt.Sprintf("%s, launched for run %s, runs on EC2 though its item is terminated", id, run))
		case it.RunID == run:
			// reported from the index
		case it.State != state.Idle && it.State != state.Stopped && it.RunID == "":
			held = append(held, fmt.Sprintf("%s, launched for run %s, is %s without a run", id, run, it.State))
		}
	}
	for _, r := range w.GH.Runners("") {
		if _, rr, ok := w.RunnerNames().Parse(r.Name); ok && slices.Contains(runs, rr) {
			held = append(held, fmt.Sprintf("runner %s of run %s is still registered", r.Name, rr))
		}
	}
	slices.Sort(held)
	slices.Sort(orphans)
	return held, orphans, nil
}

// runnersOf returns the names of the stack's runners registered for run.
func (w *world) runnersOf(run string) []string {
	var out []string
	for _, r := range w.GH.Runners("") {
		if _, rr, ok := w.RunnerNames().Parse(r.Name); ok && rr == run {
			out = append(out, r.Name)
		}
	}
	return out
}

// offer is one pool message, as peekOffers saw it.
type offer struct {
	offers.Message
	handle string
}

// peekOffers reads every visible offer of the pool and makes them visible again at once, so
// that, unlike localenv's Offered, it can be called at any point of a test in which nothing else
// is receiving. Offers held by a claimer (in flight) are not seen.
func (w *world) peekOffers(ctx context.Context) ([]offer, error) {
	client := sqs.NewFromConfig(w.AWS)
	var out []offer
	defer func() {
		for chunk := range slices.Chunk(out, 10) {
			var entries []sqstypes.ChangeMessageVisibilityBatchRequestEntry
			for i, o := range chunk {
				entries = append(entries, sqstypes.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)),
					ReceiptHandle: aws.String(o.handle), VisibilityTimeout: 0})
			}
			_, _ = client.ChangeMessageVisibilityBatch(context.WithoutCancel(ctx),
				&sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(w.Doc.QueueURL), Entries: entries})
		}
	}()
	for {
		msgs, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.Doc.QueueURL),
			MaxNumberOfMessages: 10, VisibilityTimeout: 30})
		if err != nil {
			return nil, fmt.Errorf("peek at the offers of pool %s: %w", w.Pool, err)
		}
		if len(msgs.Messages) == 0 {
			return out, nil
		}
		for _, m := range msgs.Messages {
			pm, err := offers.ParseMessage(aws.ToString(m.Body), w.Pool)
			if err != nil {
				return nil, err
			}
			out = append(out, offer{Message: pm, handle: aws.ToString(m.ReceiptHandle)})
		}
	}
}

// inFlight returns how many of the pool's offers a claimer holds (received, not yet visible).
func (w *world) inFlight(ctx context.Context) (int, error) {
	out, err := sqs.NewFromConfig(w.AWS).GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(w.Doc.QueueURL),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
}

// badOffers returns the offers that point at an instance that is not idle (stopped, for an offer
// of a stopped instance), each described with the item's state and whether the offer is stale
// (written for an older version of the item) or current.
func (w *world) badOffers(ctx context.Context, offers []offer) ([]string, error) {
	ids := make([]string, 0, len(offers))
	for _, o := range offers {
		ids = append(ids, o.InstanceID)
	}
	its, err := w.items(ctx, ids)
	if err != nil {
		return nil, err
	}
	var bad []string
	for _, o := range offers {
		it, ok := its[o.InstanceID]
		want := state.Idle
		if o.Stopped {
			want = state.Stopped
		}
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("offer of %s (version %d) points at an instance without an item", o.InstanceID, o.Version))
		case it.State != want:
			age := "current"
			if it.Version > o.Version {
				age = fmt.Sprintf("stale: the item moved on to version %d", it.Version)
			}
			bad = append(bad, fmt.Sprintf("offer of %s (version %d, %s) points at a %s instance (run %q, %q)",
				o.InstanceID, o.Version, age, it.State, it.RunID, it.StateReason))
		}
	}
	return bad, nil
}

// inconsistencies returns what breaks the world's invariants: an instance EC2 runs must have a
// live item that agrees with it (no run when idle, a run when claimed or running); no item may
// stay claimed or created past its threshold (checked against refreshedAt, the start of the last
// refresh, which expires what was past it then).
func (w *world) inconsistencies(ctx context.Context, refreshedAt time.Time) ([]string, error) {
	insts, err := w.ec2Instances(ctx)
	if err != nil {
		return nil, err
	}
	var running []string
	for id, x := range insts {
		if live(x.state) {
			running = append(running, id)
		}
	}
	its, err := w.items(ctx, running)
	if err != nil {
		return nil, err
	}
	var bad []string
	for _, id := range running {
		it, ok := its[id]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s is %s on EC2 without an item", id, insts[id].state))
		case it.State == state.Terminated:
			bad = append(bad, fmt.Sprintf("%s is %s on EC2 though its item is terminated (%q)", id, insts[id].state, it.StateReason))
		case it.State == state.Stopped:
			bad = append(bad, fmt.Sprintf("%s is %s on EC2 though its item is stopped", id, insts[id].state))
		case (it.State == state.Idle) != (it.RunID == "") && it.State != state.Created:
			bad = append(bad, fmt.Sprintf("%s is %s with run %q", id, it.State, it.RunID))
		}
	}
	for _, st := range []state.State{state.Claimed, state.Created} {
		items, err := w.Store.InPoolState(ctx, w.Pool, st)
		if err != nil {
			return nil, err
		}
		for _, in := range items {
			if in.Threshold.Before(refreshedAt) {
				bad = append(bad, fmt.Sprintf("%s stays %s (run %q) past its threshold %s", in.ID, st, in.RunID, in.Threshold.UTC().Format(time.RFC3339Nano)))
			}
		}
	}
	slices.Sort(bad)
	return bad, nil
}

// runnerProblems checks the GitHub stand-in against the items: every runner of the stack is named
// for an instance and a run, carries the run's label, and that instance's item holds that run.
func (w *world) runnerProblems(ctx context.Context) ([]string, error) {
	runners := w.GH.Runners("")
	var ids []string
	for _, r := range runners {
		if id, _, ok := w.RunnerNames().Parse(r.Name); ok {
			ids = append(ids, id)
		}
	}
	its, err := w.items(ctx, ids)
	if err != nil {
		return nil, err
	}
	var bad []string
	for _, r := range runners {
		id, run, ok := w.RunnerNames().Parse(r.Name)
		if !ok {
			bad = append(bad, fmt.Sprintf("runner %q is not named for an instance and a run of stack %s", r.Name, w.Stack))
			continue
		}
		if !slices.Contains(r.Labels, run) {
			bad = append(bad, fmt.Sprintf("runner %s lacks its run's label %s: %v", r.Name, run, r.Labels))
		}
		for _, l := range r.Labels {
			if _, err := strconv.ParseUint(l, 10, 64); err == nil && l != run {
				bad = append(bad, fmt.Sprintf("runner %s carries another run's label %s", r.Name, l))
			}
		}
		if it, ok := its[id]; !ok || it.RunID != run {
			holder := "no item"
			if ok {
				holder = fmt.Sprintf("item %s with run %q", it.State, it.RunID)
			}
			bad = append(bad, fmt.Sprintf("runner %s (label %s) is on %s, which has %s", r.Name, run, id, holder))
		}
	}
	return bad, nil
}

// proc is a step binary started in the background, to be killed at a chosen point.
type proc struct {
	cmd  *exec.Cmd
	out  *testbed.Buffer
	done chan struct{}
	err  error
}

// start starts bin with args and env.
func (w *world) start(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), out: &testbed.Buffer{}, done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	require.NoError(t, p.cmd.Start())
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the process (this one, by its pid) and waits for it; it reports whether the
// process was still running when killed.
func (p *proc) kill() bool {
	if p.exited() {
		return false
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	var exit *exec.ExitError
	return errors.As(p.err, &exit) && exit.Sys().(syscall.WaitStatus).Signaled()
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// pairs renders a map's entries sorted, for messages.
func pairs[V any](m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, m[k])
	}
	return strings.Join(parts, " ")
}
