package fake

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// Account is the account the fakes key instances by.
var Account = state.Account{Partition: "aws", Region: "us-east-1", ID: "123456789012"}

// Stack is the stack of NewWorld's pool.
const Stack = "hangar"

// Pool returns a valid pool document named name: types c7i.large then c6i.large, two subnets
// (us-east-1a, us-east-1b), market spot-fallback, the repositories of octo and acme, reuse
// repository, no warm pool; change
// applies changes to its JSON form (a map) before it is parsed and validated.
func Pool(t testing.TB, name string, change func(doc map[string]any)) *pooldoc.Document {
	t.Helper()
	doc := map[string]any{
		"schemaVersion": 2, "name": name, "region": Account.Region, "account": Account.ID, "table": "hangar-instances",
		"queueUrl":           QueueURLBase + Stack + "-" + name,
		"deadLetterQueueUrl": QueueURLBase + Stack + "-" + name + "-dlq",
		"launchTemplate":     map[string]any{"id": "lt-0123456789abcdef0", "version": "1"},
		"specHash":           "spec1",
		"instanceTypes":      []string{"c7i.large", "c6i.large"},
		"subnets": []map[string]string{{"id": "subnet-0000000000000000a", "az": "us-east-1a"},
			{"id": "subnet-0000000000000000b", "az": "us-east-1b"}},
		"market":              "spot-fallback",
		"allowedRepositories": []string{"octo/*", "acme/*"},
		"runner": map[string]any{"version": "2.321.0", "baseUrl": "https://github.com/actions/runner/releases/download",
			"sha256": map[string]string{"x64": "ba46ba7ce3a4d7236b16fbe44419fb453bc08f866b24f04d549ec89f1722a29e"}},
	}
	if change != nil {
		change(doc)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pooldoc.Parse(b)
	if err != nil {
		t.Fatalf("fake pool document: %v", err)
	}
	return out
}

// QueueURLBase is the URL of every fake queue up to its name.
const QueueURLBase = "https://sqs.us-east-1.amazonaws.com/123456789012/"

// World is one test's fakes, wired to each other, with one pool.
type World struct {
	Doc    *pooldoc.Document
	Store  *Store
	EC2    *EC2
	SQS    *SQS
	SSM    *SSM
	GitHub *GitHub
	// Bells are the stack's doorbells, on the fake SQS: what provision and the dispatcher hand
	// over reaches the fake agent there.
	Bells *doorbell.Bells
	// Pools is the real offers.Directory, reading the pool's document from the fake SSM and
	// offering on the fake SQS.
	Pools    *offers.Directory
	Launcher *Launcher
	// Pool is the real pool on the fakes above, as the wiring builds it.
	Pool *pool.Pool
	// Agent answers for every instance (Register unless told otherwise); it runs until the test
	// ends.
	Agent *Agent
}

// NewWorld returns a world around doc (Pool(t, "linux", nil) when nil) with its agent running.
func NewWorld(t testing.TB, doc *pooldoc.Document) *World {
	t.Helper()
	if doc == nil {
		doc = Pool(t, "linux", nil)
	}
	w := &World{Doc: doc, Store: NewStore(doc.StateAccount()), EC2: &EC2{Subnets: map[string]string{}}, SQS: &SQS{},
		SSM: &SSM{}, GitHub: &GitHub{}}
	w.Bells = &doorbell.Bells{SQS: w.SQS, Stack: Stack, Base: QueueURLBase, Manages: true}
	for _, s := range doc.Subnets {
		w.EC2.Subnets[s.ID] = s.AZ
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	w.SSM.Put(pooldoc.ParameterName(Stack, doc.Name), string(b))
	w.Pools = &offers.Directory{Loader: &pooldoc.Loader{SSM: w.SSM, Stack: Stack}, SQS: w.SQS}
	w.Launcher = NewLauncher(w.EC2)
	w.Launcher.Fleet.MaxBackoff = 50 * time.Millisecond
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	w.Launcher.Fleet.Log = quiet
	w.Pool = &pool.Pool{Stack: Stack, Store: w.Store, EC2: w.EC2, Queues: w.Pools, Launcher: w.Launcher, Bells: w.Bells, Log: quiet}
	w.Agent = &Agent{Store: w.Store, SQS: w.SQS, GitHub: w.GitHub}
	w.Agent.Start(context.Background())
	t.Cleanup(w.Agent.Stop)
	return w
}

// makeBell makes instance id's doorbell, tagged with its ARN, as its launch (or its agent) does.
func (w *World) makeBell(t testing.TB, id string) {
	t.Helper()
	if _, err := doorbell.Own(context.Background(), w.SQS, Stack, w.Doc.QueueURL, id, w.Doc.StateAccount().ARN(id)); err != nil {
		t.Fatal(err)
	}
}

// Queue returns the pool's queue.
func (w *World) Queue(t testing.TB) *offers.Queue {
	t.Helper()
	q, err := offers.NewQueue(w.SQS, w.Doc.Name, w.Doc.QueueURL, w.Doc.DeadLetterQueueURL)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// Selector returns the real offers.Selector on the pool's queue and the fake store.
func (w *World) Selector(t testing.TB) *offers.Selector {
	return &offers.Selector{Queue: w.Queue(t), Store: w.Store}
}

// Offered returns the ids of the instances the pool's queue offers, one per message.
func (w *World) Offered(t testing.TB) []string {
	t.Helper()
	ids, err := w.SQS.Offered(w.Doc.QueueURL, w.Doc.Name)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// Idle is an idle instance to set up with AddIdle.
type Idle struct {
	// Served are the repositories it served (none: fresh); the last is its last run's.
	Served []string
	// LastRun is the run it last served ("" when fresh).
	LastRun string
	// RegisterFailures counts its failed registrations in a row.
	RegisterFailures int
	// Type is its instance type (the pool's first when empty).
	Type string
	// Stale leaves its heartbeat older than state.HeartbeatFresh.
	Stale bool
	// Deadline is its idle threshold (the pool's idle timeout from now when zero).
	Deadline time.Time
	// Stopped leaves it stopped (on EC2 and in its item) for the stopped part of a warm pool.
	Stopped bool
}

var idleSeq atomic.Int64

// AddIdle sets up an idle instance of the pool: running on EC2 (or stopped), its item idle (or
// stopped) at version 4 with a fresh heartbeat (unless Stale), and offered on the pool's queue.
// It returns the item.
func (w *World) AddIdle(t testing.TB, in Idle) *state.Instance {
	t.Helper()
	id := fmt.Sprintf("i-%017x", 0x1d1e0000000+idleSeq.Add(1))
	typ := in.Type
	if typ == "" {
		typ = w.Doc.InstanceTypes[0]
	}
	now := time.Now()
	beat := now
	if in.Stale {
		beat = now.Add(-2 * state.HeartbeatFresh)
	}
	deadline := in.Deadline
	if deadline.IsZero() {
		deadline = now.Add(w.Doc.Timeout(state.Idle))
	}
	w.EC2.Launch(id, typ, fleet.ForWarmPool(Stack, w.Doc.Name), now.Add(-time.Hour))
	item := state.Instance{ID: id, Pool: w.Doc.Name, State: state.Idle, Version: 4, Threshold: stored(deadline),
		LastRunID: in.LastRun, LaunchedAt: stored(now.Add(-time.Hour)), RegisterFailures: in.RegisterFailures, Bell: w.Bells.URL(id),
		Spec: state.Spec{InstanceType: typ, UsageClass: state.UsageSpot, AZ: w.Doc.Subnets[0].AZ, VCPU: 2, MemoryMiB: 4096,
			SpecHash: w.Doc.SpecHash},
		Report: state.Report{Signal: state.SignalReady, SignalVersion: 4, HeartbeatAt: stored(beat)}}
	for _, r := range in.Served {
		item.ServedRepos = append(item.ServedRepos, r)
		item.ServedOwners = append(item.ServedOwners, names.Owner(r))
	}
	slices.Sort(item.ServedRepos)
	slices.Sort(item.ServedOwners)
	item.ServedRepos, item.ServedOwners = slices.Compact(item.ServedRepos), slices.Compact(item.ServedOwners)
	if in.LastRun != "" {
		item.Signal, item.SignalRun = state.SignalDeregistered, in.LastRun
	}
	if in.Stopped {
		item.State = state.Stopped
		if err := w.EC2.each([]string{id}, func(x *ec2Instance) { x.state = ec2types.InstanceStateNameStopped }); err != nil {
			t.Fatal(err)
		}
	}
	item.Home = w.Doc.Home()
	w.Store.Put(item)
	w.makeBell(t, id)
	out := w.Store.Item(id)
	if err := w.Queue(t).Publish(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Held is an instance serving a run, to set up with AddHeld.
type Held struct {
	Run  string
	Repo string // "octo/app" when empty
	// Claimed leaves it claimed (version 5) rather than running (version 6).
	Claimed bool
	// Unacked leaves a claim its agent never acknowledged.
	Unacked bool
	// Agent is how the fake agent answers for it, set before the item exists.
	Agent Behaviour
	// Home is how it goes back, as a launch or claim writes it (nil: its pool's document's).
	Home *state.Home
}

// AddHeld sets up an instance holding h.Run: running on EC2, its item claimed or running for the
// run, and its runner registered on GitHub (unless the claim is unacknowledged). It returns the
// item.
func (w *World) AddHeld(t testing.TB, h Held) *state.Instance {
	t.Helper()
	id := fmt.Sprintf("i-%017x", 0x4e1d0000000+idleSeq.Add(1))
	repo := h.Repo
	if repo == "" {
		repo = "octo/app"
	}
	now := time.Now()
	w.EC2.Launch(id, w.Doc.InstanceTypes[0], fleet.ForWarmPool(Stack, w.Doc.Name), now.Add(-time.Hour))
	item := state.Instance{ID: id, Pool: w.Doc.Name, State: state.Running, Version: 6, Threshold: stored(now.Add(w.Doc.Timeout(state.Running))),
		LaunchedAt: stored(now.Add(-time.Hour)), ServedRepos: []string{repo}, ServedOwners: []string{names.Owner(repo)}, Bell: w.Bells.URL(id),
		Spec: state.Spec{InstanceType: w.Doc.InstanceTypes[0], UsageClass: state.UsageSpot, AZ: w.Doc.Subnets[0].AZ, VCPU: 2,
			MemoryMiB: 4096, SpecHash: w.Doc.SpecHash},
		Assignment: state.Assignment{RunID: h.Run, RunAttempt: 1, Repo: repo, RunnerURL: "https://github.com/" + repo,
			RunnerPrefix: state.RunnerNamesOf(Stack).Prefix(), ClaimID: "claim-" + id},
		Report: state.Report{Signal: state.SignalRegistered, SignalRun: h.Run, SignalVersion: 5, HeartbeatAt: stored(now), AckVersion: 5}}
	item.Home = w.Doc.Home()
	if h.Home != nil {
		item.Home = *h.Home
	}
	if h.Claimed {
		item.State, item.Version = state.Claimed, 5
		item.Threshold = stored(now.Add(w.Doc.Timeout(state.Claimed)))
	}
	if h.Unacked {
		item.Report = state.Report{Signal: state.SignalReady, SignalVersion: 4, HeartbeatAt: stored(now)}
	} else {
		w.GitHub.AddRunner(state.RunnerNamesOf(Stack).Name(id, h.Run), "online", false)
	}
	w.Agent.Behave(id, h.Agent)
	w.Store.Put(item)
	w.makeBell(t, id)
	return w.Store.Item(id)
}
