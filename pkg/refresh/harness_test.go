package refresh_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/refresh"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
)

// These tests run refresh on the in-memory fakes (internal/testkit/fake): the real pool, offers
// and fleet launcher on a stateful store with the state machine's conditional writes and leases,
// an EC2, an SQS and an SSM, and a fake agent answering for every instance. End to end, refresh
// runs against the emulators as the stack's Lambda (cmd/refresh) and as the action's refresh
// mode (cmd/hangar).

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// rig is one test's pool on the fakes, and the document refreshes read.
type rig struct {
	*fake.World
	t   *testing.T
	ctx context.Context
	// changes make the pool's document, in order (fake.Pool's valid document first); deployed
	// is the document they make, which refreshes read (Doc is the world's, as it began).
	changes  []func(doc map[string]any)
	deployed *pooldoc.Document
	metrics  testbed.Buffer
	spend    refresh.Spend
}

func newRig(t *testing.T, changes ...func(doc map[string]any)) *rig {
	t.Helper()
	r := &rig{t: t, changes: changes}
	r.deployed = r.document()
	r.World = fake.NewWorld(t, r.deployed)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	r.ctx = ctx
	return r
}

func (r *rig) document() *pooldoc.Document {
	return fake.Pool(r.t, "linux", func(doc map[string]any) {
		for _, c := range r.changes {
			c(doc)
		}
	})
}

// update changes the pool's document for the refreshes from now on, as a redeploy does.
func (r *rig) update(change func(doc map[string]any)) {
	r.changes = append(r.changes, change)
	r.deployed = r.document()
}

// warm is a document change: a warm pool of hot running and stopped stopped instances, always.
func warm(hot, stopped int) func(doc map[string]any) {
	return func(doc map[string]any) {
		doc["warm"] = map[string]any{"schedules": []map[string]any{{"name": "default", "hot": hot, "stopped": stopped}}}
	}
}

// schedule changes the warm pool's schedule.
func (r *rig) schedule(hot, stopped int) { r.update(warm(hot, stopped)) }

func (r *rig) deps() refresh.Deps {
	return refresh.Deps{Store: r.Store, Pool: r.Pool, Pools: r.Pools, Log: quiet, Metrics: &r.metrics, Spend: r.spend}
}

// run runs one refresh of the pool with deps, as the Lambda does.
func (r *rig) run(cfg refresh.Config, deps refresh.Deps) *refresh.Report {
	r.t.Helper()
	cfg.Stack, cfg.Pools = fake.Stack, []*pooldoc.Document{r.deployed}
	rep, err := refresh.Run(r.ctx, cfg, deps)
	require.NoError(r.t, err)
	return rep
}

// refresh runs one refresh of the pool and requires it to have gone without an error.
func (r *rig) refresh(cfg refresh.Config) *refresh.Report {
	r.t.Helper()
	rep := r.run(cfg, r.deps())
	require.Empty(r.t, rep.Errors)
	for _, p := range rep.Pools {
		require.Empty(r.t, p.Errors)
	}
	return rep
}

// inState returns the pool's instances in a state, by id.
func (r *rig) inState(st state.State) []state.Instance {
	var out []state.Instance
	for _, in := range r.Store.Items() {
		if in.Pool == r.deployed.Name && in.State == st {
			out = append(out, *in)
		}
	}
	slices.SortFunc(out, func(a, b state.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// waitFor waits, up to 30 seconds, until cond holds for the store's items.
func (r *rig) waitFor(what string, cond func(items map[string]*state.Instance) bool) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	require.NoError(r.t, r.Store.Wait(ctx, cond), "waiting for %s", what)
}

// waitReady waits for every warming instance's READY.
func (r *rig) waitReady() {
	r.t.Helper()
	require.NoError(r.t, r.ready(), "waiting for the warm instances' agents to say READY")
}

// ready waits, up to 30 seconds, for every warming instance's READY.
func (r *rig) ready() error {
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	return r.Store.Wait(ctx, func(items map[string]*state.Instance) bool {
		for _, in := range items {
			if in.State == state.Created && in.RunID == "" && in.Signal != state.SignalReady {
				return false
			}
		}
		return true
	})
}

// provision runs the steps' provision for run, as a workflow's job does.
func (r *rig) provision(run string, n int) *provision.Result {
	r.t.Helper()
	res, err := provision.Run(r.ctx, provision.Config{Stack: fake.Stack, Pool: r.deployed.Name, Count: n, RunID: run, RunAttempt: 1,
		Repository: "octo/app", RegistrationTimeout: time.Minute, PollInterval: 10 * time.Millisecond},
		provision.Deps{Doc: r.Doc, Pool: r.Pool, GitHub: r.GitHub, Log: quiet})
	require.NoError(r.t, err)
	return res
}

var warmSeq atomic.Int64

// addWarming sets up a warm instance being created (no run), launched an hour ago, with its
// deadline at deadline: running on EC2 and recorded, its agent not heard from yet.
func (r *rig) addWarming(deadline time.Time) *state.Instance {
	r.t.Helper()
	in := r.addGhost(deadline)
	r.EC2.Launch(in.ID, in.InstanceType, fleet.ForWarmPool(fake.Stack, r.deployed.Name), in.LaunchedAt)
	return in
}

// addGhost sets up the item of a warm instance being created that EC2 does not know.
func (r *rig) addGhost(deadline time.Time) *state.Instance {
	r.t.Helper()
	id := fmt.Sprintf("i-%017x", 0x3a4d0000000+warmSeq.Add(1))
	r.Store.Put(state.Instance{ID: id, Pool: r.deployed.Name, State: state.Created, Version: 1, Threshold: deadline,
		LaunchedAt: time.Now().Add(-time.Hour), Bell: r.Bells.URL(id), StateReason: "warm pool", Home: r.deployed.Home(),
		Spec: state.Spec{InstanceType: r.deployed.InstanceTypes[0], UsageClass: state.UsageSpot, AZ: r.deployed.Subnets[0].AZ, VCPU: 2, MemoryMiB: 4096,
			SpecHash: r.deployed.SpecHash}})
	return r.Store.Item(id)
}

// expire moves in's deadline to a second ago, as if it had overstayed its state.
func (r *rig) expire(in *state.Instance) *state.Instance {
	r.t.Helper()
	it := *r.Store.Item(in.ID)
	it.Threshold = time.Now().Add(-time.Second)
	r.Store.Put(it)
	return r.Store.Item(in.ID)
}

func ids(insts []state.Instance) []string {
	out := make([]string, len(insts))
	for i, in := range insts {
		out[i] = in.ID
	}
	return out
}
