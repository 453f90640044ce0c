package pool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// door asks the pool for instances the way one of Hangar's doors does, and says what each
// instance it acquires must have been handed.
type door struct {
	name string
	// ask returns the request for n instances, all of repository repo.
	ask func(t *testing.T, w *fake.World, n int, repo string) (pool.Request, *asked)
}

// asked is what a door's hooks saw.
type asked struct {
	mu   sync.Mutex
	held map[string]pool.How
	// secrets is what each instance must have been handed (kind, secret), by its run.
	secrets map[string][2]string
	// unused are the assignments whose claims were lost.
	unused []state.Assignment
}

func (a *asked) heldHook(in *state.Instance, how pool.How) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, twice := a.held[in.ID]; twice {
		panic("held twice: " + in.ID)
	}
	a.held[in.ID] = how
}

const stepsRun = "4242"

// stepsDoor is the steps: one group for the run, the run's registration token for every instance.
var stepsDoor = door{name: "steps", ask: func(t *testing.T, w *fake.World, n int, repo string) (pool.Request, *asked) {
	a := &asked{held: map[string]pool.How{}, secrets: map[string][2]string{stepsRun: {pool.KindRegistration, "REGTOKEN-4242"}}}
	now := time.Now()
	return pool.Request{
		Doc: w.Doc,
		Groups: []pool.Group{{Count: n, Assign: state.Assignment{RunID: stepsRun, RunAttempt: 1, Repo: repo, RunnerURL: "https://github.com/" + repo,
			RunnerPrefix: state.RunnerNamesOf(fake.Stack).Prefix(), ClaimID: "claim-4242"}}},
		Launch: pool.Launch{Run: stepsRun, Repository: repo, Token: "hangar-" + t.Name(), Deadline: now.Add(30 * time.Second),
			Reason: "created for run " + stepsRun},
		ClaimDeadline: now.Add(w.Doc.Timeout(state.Claimed)),
		Secret: func(in *state.Instance) (pool.Secret, bool) {
			return pool.Secret{Kind: pool.KindRegistration, Value: "REGTOKEN-4242", ExpiresAt: now.Add(time.Hour)}, in.RunID == stepsRun
		},
		Held: a.heldHook,
	}, a
}}

// labelsDoor is the labels: one job per instance, each completed for its instance as it is
// claimed or recorded (a just-in-time runner made for it), its configuration handed to it alone.
var labelsDoor = door{name: "labels", ask: func(t *testing.T, w *fake.World, n int, repo string) (pool.Request, *asked) {
	a := &asked{held: map[string]pool.How{}, secrets: map[string][2]string{}}
	var (
		mu      sync.Mutex
		jobs    []string
		configs = map[string]string{} // instance → its configuration
	)
	for i := range n {
		key := names.JobKey(int64(700+i), 0)
		jobs = append(jobs, key)
		a.secrets[key] = [2]string{pool.KindJIT, "JIT-" + key}
	}
	now := time.Now()
	return pool.Request{
		Doc: w.Doc,
		Groups: []pool.Group{{Count: n, Assign: state.Assignment{Repo: repo, RunnerURL: "https://github.com/" + repo,
			RunnerPrefix: state.RunnerNamesOf(fake.Stack).Prefix(), ClaimID: "claim-jobs"}}},
		Launch:        pool.Launch{Token: "hangar-jobs-" + t.Name(), Deadline: now.Add(30 * time.Second), Reason: "created for label-routed jobs"},
		ClaimDeadline: now.Add(w.Doc.Timeout(state.Claimed)),
		Personalize: func(_ context.Context, id string, as *state.Assignment) error {
			mu.Lock()
			defer mu.Unlock()
			if len(jobs) == 0 {
				return pool.ErrNoneLeft
			}
			as.RunID, as.RunnerID, as.Installation = jobs[0], 9000+int64(len(jobs)), 7
			configs[id] = "JIT-" + jobs[0]
			jobs = jobs[1:]
			return nil
		},
		Unused: func(id string, as state.Assignment) {
			mu.Lock()
			defer mu.Unlock()
			jobs = append([]string{as.RunID}, jobs...)
			delete(configs, id)
			a.mu.Lock()
			a.unused = append(a.unused, as)
			a.mu.Unlock()
		},
		Secret: func(in *state.Instance) (pool.Secret, bool) {
			mu.Lock()
			defer mu.Unlock()
			c, ok := configs[in.ID]
			delete(configs, in.ID)
			return pool.Secret{Kind: pool.KindJIT, Value: c}, ok
		},
		Held: a.heldHook,
	}, a
}}

var doors = []door{stepsDoor, labelsDoor}

// acquire runs one Acquire and waits for its hand-overs.
func acquire(t *testing.T, w *fake.World, req pool.Request) *pool.Acquired {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	acq, err := w.Pool.Acquire(ctx, req)
	require.NoError(t, err)
	acq.Wait()
	return acq
}

// requireHandedOver asserts that every instance acquired holds its assignment in its item (claimed
// or created, as acquired), that the door heard of it once, as acquired, and that its doorbell
// holds exactly one hand-over: of the secret its assignment gets, for its run and version.
func requireHandedOver(t *testing.T, w *fake.World, acq *pool.Acquired, a *asked) {
	t.Helper()
	check := func(in *state.Instance, want state.State, how ...pool.How) {
		it := w.Store.Item(in.ID)
		require.Equal(t, want, it.State, in.ID)
		require.NotEmpty(t, it.RunID, "%s holds an assignment", in.ID)
		require.Equal(t, in.Version, it.Version, in.ID)
		require.Contains(t, how, a.held[in.ID], "%s: the door heard how it came", in.ID)
		secret, ok := a.secrets[it.RunID]
		require.True(t, ok, "%s holds %s, which the door never gave", in.ID, it.RunID)
		var got []doorbell.HandOver
		for _, body := range w.SQS.Bodies(w.Bells.URL(in.ID)) {
			var h doorbell.HandOver
			if json.Unmarshal([]byte(body), &h) == nil && h.Secret != "" {
				got = append(got, h)
			}
		}
		require.Len(t, got, 1, "%s: one hand-over on its own doorbell", in.ID)
		require.Equal(t, doorbell.HandOver{Run: it.RunID, Version: it.Version, Kind: secret[0], Secret: secret[1], ExpiresAt: got[0].ExpiresAt}, got[0], in.ID)
	}
	for _, in := range acq.Claimed {
		check(in, state.Claimed, pool.Claimed, pool.ClaimedStopped)
	}
	for _, in := range acq.Created {
		check(in, state.Created, pool.Created)
	}
	require.Len(t, a.held, len(acq.Claimed)+len(acq.Created), "the door heard of every instance, and of no other")
}

func ids(insts []*state.Instance) []string {
	out := make([]string, len(insts))
	for i, in := range insts {
		out[i] = in.ID
	}
	return out
}

// TestAcquireClaimsBeforeItCreates: both doors get the pool's warm instances that fit first (a
// stopped one started), the rest created with one fleet request, and every instance is handed
// its own secret through its doorbell; a warm instance another repository served stays offered.
func TestAcquireClaimsBeforeItCreates(t *testing.T) {
	t.Parallel()
	for _, d := range doors {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			w := fake.NewWorld(t, nil)
			hot := w.AddIdle(t, fake.Idle{Served: []string{"octo/app"}, LastRun: "100"})
			stopped := w.AddIdle(t, fake.Idle{Stopped: true})
			other := w.AddIdle(t, fake.Idle{Served: []string{"octo/other"}, LastRun: "101"})
			req, a := d.ask(t, w, 4, "octo/app")

			acq := acquire(t, w, req)
			require.NoError(t, errors.Join(acq.ClaimErr, acq.StartErr, acq.CreateErr))
			require.ElementsMatch(t, []string{hot.ID, stopped.ID}, ids(acq.Claimed), "the pool's fitting instances first")
			require.Equal(t, []string{stopped.ID}, acq.Stopped)
			require.Len(t, acq.Created, 2, "the rest created")
			require.Equal(t, 1, w.EC2.Calls("CreateFleet"), "in one request")
			require.Equal(t, pool.Claimed, a.held[hot.ID])
			require.Equal(t, pool.ClaimedStopped, a.held[stopped.ID])
			require.Equal(t, ec2types.InstanceStateNameRunning, w.EC2.State(stopped.ID), "the stopped instance is started")
			requireHandedOver(t, w, acq, a)
			for _, in := range acq.Created {
				require.NotContains(t, w.EC2.Tags(in.ID), fleet.TagUnrecorded, "recorded, then untagged")
			}
			require.Equal(t, []string{other.ID}, w.Offered(t), "another repository's instance stays offered; the claimed ones' offers are gone")
			require.Equal(t, state.Idle, w.Store.Item(other.ID).State)
		})
	}
}

// TestAcquireFromADrainedPoolCreates: a drained pool offers nothing: every instance is new, and
// its warm instance is neither claimed nor its offer touched.
func TestAcquireFromADrainedPoolCreates(t *testing.T) {
	t.Parallel()
	for _, d := range doors {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			w := fake.NewWorld(t, fake.Pool(t, "linux", func(doc map[string]any) { doc["drained"] = true }))
			idle := w.AddIdle(t, fake.Idle{})
			req, a := d.ask(t, w, 2, "octo/app")

			acq := acquire(t, w, req)
			require.NoError(t, errors.Join(acq.ClaimErr, acq.StartErr, acq.CreateErr))
			require.Empty(t, acq.Claimed)
			require.Len(t, acq.Created, 2)
			requireHandedOver(t, w, acq, a)
			require.Equal(t, state.Idle, w.Store.Item(idle.ID).State)
			require.Equal(t, []string{idle.ID}, w.Offered(t))
		})
	}
}

// TestAcquireUnderCapacityFaults: every capacity fault EC2 answers an instant fleet with, for
// both doors: the instances come from another type, zone or market, or later requests, or not
// at all (an error, and nothing left running or recorded).
func TestAcquireUnderCapacityFaults(t *testing.T) {
	t.Parallel()
	faults := []struct {
		name  string
		fault func(w *fake.World)
		// check asserts what was created (nil when nothing could be).
		check  func(t *testing.T, w *fake.World, created []*state.Instance)
		fleets int
		err    string
	}{
		{name: "no capacity of the first type anywhere: the second type",
			fault: func(w *fake.World) { w.EC2.NoCapacity("c7i.large", "", "") },
			check: func(t *testing.T, w *fake.World, created []*state.Instance) {
				for _, in := range created {
					require.Equal(t, "c6i.large", in.InstanceType, in.ID)
				}
			}, fleets: 1},
		{name: "no capacity in the first zone: the second zone",
			fault: func(w *fake.World) { w.EC2.NoCapacity("", "us-east-1a", "") },
			check: func(t *testing.T, w *fake.World, created []*state.Instance) {
				for _, in := range created {
					require.Equal(t, "us-east-1b", in.AZ, in.ID)
				}
			}, fleets: 1},
		{name: "no spot capacity anywhere: on-demand",
			fault: func(w *fake.World) { w.EC2.NoCapacity("", "", fake.Spot) },
			check: func(t *testing.T, w *fake.World, created []*state.Instance) {
				for _, in := range created {
					require.Equal(t, state.UsageOnDemand, in.UsageClass, in.ID)
				}
			}, fleets: 2},
		{name: "partly fulfilled: the rest in the next request",
			fault: func(w *fake.World) { w.EC2.Partial(1) },
			check: func(t *testing.T, w *fake.World, created []*state.Instance) {
				require.Len(t, created, 3)
			}, fleets: 2},
		{name: "no capacity anywhere: an error",
			fault: func(w *fake.World) { w.EC2.NoCapacity("", "", "") }, err: "InsufficientInstanceCapacity"},
		{name: "refused for good (a bad image): an error at once",
			fault: func(w *fake.World) {
				w.EC2.Inject("CreateFleet", fake.APIError("InvalidAMIID.NotFound", "The image id '[ami-0]' does not exist"))
			}, fleets: 1, err: "InvalidAMIID.NotFound"},
	}
	for _, d := range doors {
		for _, f := range faults {
			t.Run(d.name+"/"+f.name, func(t *testing.T) {
				t.Parallel()
				w := fake.NewWorld(t, nil)
				f.fault(w)
				req, a := d.ask(t, w, 3, "octo/app")
				if f.err != "" {
					req.Launch.Deadline = time.Now().Add(time.Second) // the capacity retries' bound
				}

				acq := acquire(t, w, req)
				require.NoError(t, errors.Join(acq.ClaimErr, acq.StartErr))
				if f.fleets > 0 {
					require.Equal(t, f.fleets, w.EC2.Calls("CreateFleet"))
				}
				if f.err != "" {
					require.ErrorContains(t, acq.CreateErr, f.err)
					require.Empty(t, acq.Created)
					require.Empty(t, w.Store.Items(), "nothing recorded")
					require.Empty(t, w.EC2.InState(ec2types.InstanceStateNameRunning), "nothing left running")
					require.Empty(t, a.held)
					return
				}
				require.NoError(t, acq.CreateErr)
				require.Len(t, acq.Created, 3)
				f.check(t, w, acq.Created)
				requireHandedOver(t, w, acq, a)
			})
		}
	}
}

// TestAcquireGroupsByRepository: the labels door asks for one group per repository; each claims
// only what its repository's reuse scope lets it, and what is left of all groups is created in
// one request, each instance completed for a job of its own group.
func TestAcquireGroupsByRepository(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	app := w.AddIdle(t, fake.Idle{Served: []string{"octo/app"}, LastRun: "j1"})
	web := w.AddIdle(t, fake.Idle{Served: []string{"octo/web"}, LastRun: "j2"})
	req, a := labelsDoor.ask(t, w, 4, "octo/app")
	byRepo := map[string][]string{"octo/app": {"j700", "j701"}, "octo/web": {"j702", "j703"}}
	var mu sync.Mutex
	configs := map[string]string{}
	req.Groups = []pool.Group{{Count: 2, Assign: state.Assignment{Repo: "octo/app", ClaimID: "c"}}, {Count: 2, Assign: state.Assignment{Repo: "octo/web", ClaimID: "c"}}}
	req.Personalize = func(_ context.Context, id string, as *state.Assignment) error {
		mu.Lock()
		defer mu.Unlock()
		left := byRepo[as.Repo]
		if len(left) == 0 {
			return pool.ErrNoneLeft
		}
		as.RunID, byRepo[as.Repo] = left[0], left[1:]
		configs[id] = "JIT-" + as.RunID
		return nil
	}
	req.Secret = func(in *state.Instance) (pool.Secret, bool) {
		mu.Lock()
		defer mu.Unlock()
		c, ok := configs[in.ID]
		return pool.Secret{Kind: pool.KindJIT, Value: c}, ok
	}

	acq := acquire(t, w, req)
	require.NoError(t, errors.Join(acq.ClaimErr, acq.StartErr, acq.CreateErr))
	require.ElementsMatch(t, []string{app.ID, web.ID}, ids(acq.Claimed))
	require.Equal(t, "octo/app", w.Store.Item(app.ID).Repo, "each warm instance serves the repository it served")
	require.Equal(t, "octo/web", w.Store.Item(web.ID).Repo)
	require.Len(t, acq.Created, 2)
	require.Equal(t, 1, w.EC2.Calls("CreateFleet"), "one request for both groups")
	repos := map[string]int{}
	for _, in := range acq.Created {
		it := w.Store.Item(in.ID)
		repos[it.Repo]++
		require.True(t, strings.HasPrefix(it.RunID, "j"), it.RunID)
	}
	require.Equal(t, map[string]int{"octo/app": 1, "octo/web": 1}, repos, "one new instance per group")
	require.Empty(t, byRepo["octo/app"])
	require.Empty(t, byRepo["octo/web"])
	requireHandedOver(t, w, acq, a)
}

// TestAcquireWhenAssignmentsFail: when a group's assignments cannot be made (GitHub refusing to
// make its runners), its claims are not made, its warm instance stays offered, and nothing is
// created for it; an instance created whose assignment fails is recorded warm, with nothing
// handed over.
func TestAcquireWhenAssignmentsFail(t *testing.T) {
	t.Parallel()
	t.Run("claim", func(t *testing.T) {
		t.Parallel()
		w := fake.NewWorld(t, nil)
		idle := w.AddIdle(t, fake.Idle{})
		req, a := labelsDoor.ask(t, w, 2, "octo/app")
		req.Personalize = func(context.Context, string, *state.Assignment) error {
			return errors.New("GitHub: 503 Service Unavailable")
		}
		acq := acquire(t, w, req)
		require.ErrorContains(t, acq.ClaimErr, "503")
		require.Empty(t, acq.Claimed)
		require.Empty(t, acq.Created, "new instances would fail the same way")
		require.Zero(t, w.EC2.Calls("CreateFleet"))
		require.Equal(t, state.Idle, w.Store.Item(idle.ID).State)
		require.Equal(t, []string{idle.ID}, w.Offered(t), "its offer given back for others")
		require.Empty(t, a.held)
	})
	t.Run("create", func(t *testing.T) {
		t.Parallel()
		w := fake.NewWorld(t, fake.Pool(t, "linux", func(doc map[string]any) { doc["drained"] = true }))
		req, a := labelsDoor.ask(t, w, 2, "octo/app")
		personalize := req.Personalize
		var calls sync.Mutex
		n := 0
		req.Personalize = func(ctx context.Context, id string, as *state.Assignment) error {
			calls.Lock()
			n++
			first := n == 1
			calls.Unlock()
			if first {
				return errors.New("GitHub: 503 Service Unavailable")
			}
			return personalize(ctx, id, as)
		}
		acq := acquire(t, w, req)
		require.NoError(t, acq.CreateErr, "recorded all the same")
		require.Len(t, acq.Created, 2)
		var warm, assigned []string
		for _, in := range acq.Created {
			if in.RunID == "" {
				warm = append(warm, in.ID)
			} else {
				assigned = append(assigned, in.ID)
			}
		}
		require.Len(t, warm, 1, "the instance without its job is a warm instance of the pool")
		require.Len(t, assigned, 1)
		require.Equal(t, state.Created, w.Store.Item(warm[0]).State)
		require.Empty(t, w.SQS.Bodies(w.Bells.URL(warm[0])), "nothing handed over")
		require.Len(t, w.SQS.Bodies(w.Bells.URL(assigned[0])), 1)
		require.Len(t, a.held, 2)
	})
}

// TestAcquireUndoesLostClaims: a claim that loses (the offer was stale: the instance moved on)
// has what was made for it undone (Unused), and the instance is created instead.
func TestAcquireUndoesLostClaims(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	idle := w.AddIdle(t, fake.Idle{})
	moved := *w.Store.Item(idle.ID)
	moved.Version += 2 // refreshed since its offer was sent
	w.Store.Put(moved)
	req, a := labelsDoor.ask(t, w, 1, "octo/app")

	acq := acquire(t, w, req)
	require.NoError(t, errors.Join(acq.ClaimErr, acq.StartErr, acq.CreateErr))
	require.Empty(t, acq.Claimed)
	require.Len(t, a.unused, 1, "the lost claim's assignment undone")
	require.Equal(t, "j700", a.unused[0].RunID)
	require.Len(t, acq.Created, 1)
	require.Equal(t, "j700", w.Store.Item(acq.Created[0].ID).RunID, "the job goes to the instance created instead")
	require.Equal(t, state.Idle, w.Store.Item(idle.ID).State, "the instance that moved on is left alone")
	requireHandedOver(t, w, acq, a)
}

// TestAcquireRefusesBadRequests: a request with no instances, too many, or nothing to hand
// over is refused before anything is claimed or launched.
func TestAcquireRefusesBadRequests(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	w.AddIdle(t, fake.Idle{})
	for _, tc := range []struct {
		name   string
		change func(*pool.Request)
		err    string
	}{
		{"no document", func(r *pool.Request) { r.Doc = nil }, "no pool document"},
		{"none", func(r *pool.Request) { r.Groups[0].Count = 0 }, "0 instances: want 1 to 100"},
		{"too many", func(r *pool.Request) { r.Groups[0].Count = pool.MaxCount + 1 }, fmt.Sprintf("%d instances: want 1 to 100", pool.MaxCount+1)},
		{"nothing to hand over", func(r *pool.Request) { r.Secret = nil }, "no Secret hook"},
	} {
		req, _ := stepsDoor.ask(t, w, 1, "octo/app")
		tc.change(&req)
		_, err := w.Pool.Acquire(context.Background(), req)
		require.ErrorContains(t, err, tc.err, tc.name)
	}
	require.Zero(t, w.EC2.Calls("CreateFleet"))
	require.Zero(t, w.SQS.Calls("ReceiveMessage"))
	require.Len(t, w.Offered(t), 1, "the warm instance still offered")
}

// TestAcquireSecondOfferOfAClaimedInstance: SQS delivers at least once, so an instance may be
// offered twice; one group claims it, and the next never makes an assignment for it (no runner
// minted, no secret of its handed to the instance): it creates its own instead.
func TestAcquireSecondOfferOfAClaimedInstance(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	fresh := w.AddIdle(t, fake.Idle{})
	require.NoError(t, w.Queue(t).Publish(ctx(t), fresh)) // the same offer, again
	req, _ := labelsDoor.ask(t, w, 2, "octo/app")
	var mu sync.Mutex
	personalized := map[string][]string{} // instance → the repositories it was completed for
	secrets := map[string]string{}
	req.Groups = []pool.Group{{Count: 1, Assign: state.Assignment{Repo: "octo/app", ClaimID: "c"}}, {Count: 1, Assign: state.Assignment{Repo: "octo/other", ClaimID: "c"}}}
	req.Personalize = func(_ context.Context, id string, as *state.Assignment) error {
		mu.Lock()
		defer mu.Unlock()
		personalized[id] = append(personalized[id], as.Repo)
		as.RunID = map[string]string{"octo/app": "j11", "octo/other": "j12"}[as.Repo]
		secrets[id+"/"+as.RunID] = "JIT-" + as.RunID
		return nil
	}
	req.Unused = func(id string, as state.Assignment) {
		mu.Lock()
		defer mu.Unlock()
		delete(secrets, id+"/"+as.RunID)
	}
	req.Secret = func(in *state.Instance) (pool.Secret, bool) {
		mu.Lock()
		defer mu.Unlock()
		s, ok := secrets[in.ID+"/"+in.RunID]
		return pool.Secret{Kind: pool.KindJIT, Value: s}, ok
	}
	req.Held = nil

	acq := acquire(t, w, req)
	require.NoError(t, errors.Join(acq.ClaimErr, acq.StartErr, acq.CreateErr))
	require.Equal(t, []string{fresh.ID}, ids(acq.Claimed))
	require.Equal(t, "j11", w.Store.Item(fresh.ID).RunID, "the first group's")
	require.Equal(t, []string{"octo/app"}, personalized[fresh.ID], "nothing made for it by the second group")
	require.Len(t, acq.Created, 1, "the second group creates its own")
	require.Equal(t, "j12", w.Store.Item(acq.Created[0].ID).RunID)
	var handed []string
	for _, body := range w.SQS.Bodies(w.Bells.URL(fresh.ID)) {
		var h doorbell.HandOver
		if json.Unmarshal([]byte(body), &h) == nil && h.Secret != "" {
			handed = append(handed, h.Secret)
		}
	}
	require.Equal(t, []string{"JIT-j11"}, handed, "the claimed instance is handed its own job's runner only")
}
