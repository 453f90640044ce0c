package pool_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// live counts the store's live instances of pool.
func live(t *testing.T, w *fake.World, name string) int {
	t.Helper()
	c, err := w.Store.Census(context.Background(), name)
	require.NoError(t, err)
	return c.Live()
}

// TestAcquireHoldsMaxInstances: for both doors, a pool at three of its maxInstances 4 claims
// what fits and creates one more, not three: the rest is Capped, with an error naming the cap;
// once full, nothing is created at all, and claims still work.
func TestAcquireHoldsMaxInstances(t *testing.T) {
	t.Parallel()
	for _, d := range doors {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			w := fake.NewWorld(t, fake.Pool(t, "linux", func(m map[string]any) { m["maxInstances"] = 4 }))
			hot := w.AddIdle(t, fake.Idle{})
			w.AddIdle(t, fake.Idle{Served: []string{"octo/other"}, LastRun: "101"}) // live, not this repository's
			w.AddIdle(t, fake.Idle{Served: []string{"octo/other"}, LastRun: "102"})
			req, a := d.ask(t, w, 4, "octo/app")
			acq := acquire(t, w, req)
			require.NoError(t, errors.Join(acq.ClaimErr, acq.StartErr, acq.CreateErr))
			require.Equal(t, []string{hot.ID}, ids(acq.Claimed))
			require.Len(t, acq.Created, 1, "one more fits under the cap")
			require.Equal(t, 2, acq.Capped)
			require.ErrorIs(t, acq.CapErr, pool.ErrAtCapacity)
			require.ErrorContains(t, acq.CapErr, "pool linux has 3 live instances of its maxInstances 4, so 2 of 3 could not be created")
			requireHandedOver(t, w, acq, a)
			require.Equal(t, 4, live(t, w, "linux"))

			req, _ = d.ask(t, w, 2, "octo/app")
			acq = acquire(t, w, req)
			require.Empty(t, acq.Created)
			require.Equal(t, 2, acq.Capped)
			require.Equal(t, 1, w.EC2.Calls("CreateFleet"), "nothing launched when full")
			require.Equal(t, 4, live(t, w, "linux"))
		})
	}
}

// TestConcurrentAcquiresShareTheCap: eight acquires at once on an empty pool with maxInstances 10,
// each asking for 3, create exactly 10 instances between them (the cap's lease makes each count
// what the others recorded), and the rest is Capped.
func TestConcurrentAcquiresShareTheCap(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, fake.Pool(t, "linux", func(m map[string]any) { m["maxInstances"] = 10 }))
	var (
		wg              sync.WaitGroup
		mu              sync.Mutex
		created, capped int
	)
	for i := range 8 {
		wg.Go(func() {
			req, _ := stepsDoor.ask(t, w, 3, "octo/app")
			req.Launch.Token = req.Launch.Token + string(rune('a'+i))
			acq := acquire(t, w, req)
			mu.Lock()
			defer mu.Unlock()
			created += len(acq.Created)
			capped += acq.Capped
		})
	}
	wg.Wait()
	require.Equal(t, 10, created)
	require.Equal(t, 14, capped)
	require.Equal(t, 10, live(t, w, "linux"))
}

// TestStackCapCountsEveryPool: the stack's maxInstances counts the live instances of all its
// pools: with 2 live in another pool and a stack cap of 5, a pool without a cap of its own
// creates 3 of 4; a warm-pool fill under the same cap launches nothing, and says why.
func TestStackCapCountsEveryPool(t *testing.T) {
	t.Parallel()
	stackCap := &pooldoc.StackCap{MaxInstances: 5, Pools: []string{"linux", "other"}}
	w := fake.NewWorld(t, fake.Pool(t, "linux", func(m map[string]any) { m["stackCap"] = stackCap }))
	for _, id := range []string{"i-0000000000000aaa1", "i-0000000000000aaa2"} {
		w.Store.Put(state.Instance{ID: id, Pool: "other", State: state.Running, Version: 3, Assignment: state.Assignment{RunID: "77"},
			Threshold: time.Now().Add(time.Hour)})
	}
	req, _ := stepsDoor.ask(t, w, 4, "octo/app")
	acq := acquire(t, w, req)
	require.Len(t, acq.Created, 3)
	require.Equal(t, 1, acq.Capped)
	require.ErrorContains(t, acq.CapErr, "the stack has 2 live instances of its maxInstances 5")

	n, err := w.Pool.Warm(context.Background(), w.Doc, 2, time.Now(), "warm-"+t.Name(), time.Now().Add(time.Minute))
	require.Zero(t, n)
	require.ErrorIs(t, err, pool.ErrAtCapacity)
	require.Equal(t, 5, live(t, w, "linux")+live(t, w, "other"))
}

// TestCapCountsWhatEC2Sees: an instance EC2 runs for the pool that the table does not hold (just
// launched and not yet indexed, or launched by a creation that died before recording it) counts
// against the cap as much as an item does; one EC2 terminated does not.
func TestCapCountsWhatEC2Sees(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, fake.Pool(t, "linux", func(m map[string]any) { m["maxInstances"] = 3 }))
	tags := map[string]string{fleet.TagStack: fake.Stack, fleet.TagPool: "linux"}
	w.EC2.Launch("i-00000000000000ec1", "c7i.large", tags, time.Now())
	w.EC2.Launch("i-00000000000000ec2", "c7i.large", tags, time.Now())
	_, err := w.EC2.TerminateInstances(context.Background(), &ec2.TerminateInstancesInput{InstanceIds: []string{"i-00000000000000ec2"}})
	require.NoError(t, err)
	w.EC2.Launch("i-00000000000000ec3", "c7i.large", map[string]string{fleet.TagStack: "another", fleet.TagPool: "linux"}, time.Now())
	req, _ := stepsDoor.ask(t, w, 3, "octo/app")
	acq := acquire(t, w, req)
	require.Len(t, acq.Created, 2, "the orphan EC2 runs counts; the terminated one and another stack's do not")
	require.ErrorContains(t, acq.CapErr, "has 1 live instances of its maxInstances 3")
}

// TestFullCapNeedsNoLease: under a cap the table shows full, a creation says so at once, without
// waiting for the cap's lease another creation holds or asking EC2 (jobs waiting for room try
// again often, and must not queue for it).
func TestFullCapNeedsNoLease(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, fake.Pool(t, "linux", func(m map[string]any) { m["maxInstances"] = 1 }))
	w.AddIdle(t, fake.Idle{Served: []string{"octo/other"}, LastRun: "101"})
	ok, err := w.Store.Lease(context.Background(), "cap/"+fake.Stack+"/linux", state.NewLeaseHolder(), time.Minute)
	require.NoError(t, err)
	require.True(t, ok, "another creation holds the cap's lease")
	req, _ := stepsDoor.ask(t, w, 1, "octo/app")
	req.Launch.Deadline = time.Now().Add(time.Hour) // it would wait the lease's whole turn
	leases := w.Store.Calls("Lease")
	acq := acquire(t, w, req)
	require.NoError(t, acq.CreateErr)
	require.Equal(t, 1, acq.Capped)
	require.ErrorIs(t, acq.CapErr, pool.ErrAtCapacity)
	require.Equal(t, leases, w.Store.Calls("Lease"), "the lease is not asked for")
	require.Zero(t, w.EC2.Calls("DescribeInstances"), "nor EC2: the table shows the cap full")
	require.Zero(t, w.EC2.Calls("CreateFleet"))
}

// TestCreationReportsRoom: a creation under a cap says how much room it left (for the door to
// place that many more at once); one that will not wait its turn at a busy cap creates nothing,
// asks EC2 nothing, and says why; uncapped, there is nothing to report.
func TestCreationReportsRoom(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, fake.Pool(t, "linux", func(m map[string]any) { m["maxInstances"] = 4 }))
	w.AddIdle(t, fake.Idle{Served: []string{"octo/other"}, LastRun: "101"})
	req, _ := stepsDoor.ask(t, w, 1, "octo/app")
	req.Fit.InstanceTypes = []string{"m*"} // claims nothing: one is created
	acq := acquire(t, w, req)
	require.Len(t, acq.Created, 1)
	require.Equal(t, 2, acq.Room, "4, less the one live and the one created")

	holder := state.NewLeaseHolder()
	ok, err := w.Store.Lease(context.Background(), "cap/"+fake.Stack+"/linux", holder, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	req, _ = stepsDoor.ask(t, w, 2, "octo/app")
	req.Fit.InstanceTypes = []string{"m*"}
	req.Launch.NoWait = true
	req.Launch.Token += "-busy"
	fleets := w.EC2.Calls("CreateFleet")
	acq = acquire(t, w, req)
	require.Empty(t, acq.Created)
	require.Equal(t, 2, acq.Capped)
	require.ErrorIs(t, acq.CapErr, pool.ErrAtCapacity)
	require.ErrorContains(t, acq.CapErr, "another launch is counting against pool linux's maxInstances")
	require.Zero(t, acq.Room)
	require.Equal(t, fleets, w.EC2.Calls("CreateFleet"))
	require.NoError(t, w.Store.ReleaseLease(context.Background(), "cap/"+fake.Stack+"/linux", holder))

	u := fake.NewWorld(t, nil)
	req, _ = stepsDoor.ask(t, u, 1, "octo/app")
	acq = acquire(t, u, req)
	require.Len(t, acq.Created, 1)
	require.Zero(t, acq.Room, "uncapped: no room to report")
}
