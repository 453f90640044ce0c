package fake_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// The leases and cursors the table holds beside the items (refresh's launch lease, the spend
// publisher's cursor): one set of conditional writes run against the fake store and against
// state.Store on DynamoDB Local (that half skips under -short), with the same outcome asked of
// both. The tests of refresh and spend rely on the fake's; this holds it to the real one.

// controls is a store's leases and cursors.
type controls interface {
	Lease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	ReleaseLease(ctx context.Context, name, holder string) error
	Cursor(ctx context.Context, name string) (time.Time, error)
	AdvanceCursor(ctx context.Context, name string, from, to time.Time) (bool, error)
}

// clock is a settable clock.
type clock struct{ at atomic.Int64 }

func (c *clock) now() time.Time      { return time.UnixMilli(c.at.Load()) }
func (c *clock) set(t time.Time)     { c.at.Store(t.UnixMilli()) }
func (c *clock) add(d time.Duration) { c.set(c.now().Add(d)) }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.set(t)
	return c
}

func fakeControls(c *clock) controls {
	s := fake.NewStore(fake.Account)
	s.Now = c.now
	return s
}

func dynamoControls(t *testing.T, c *clock) controls {
	testbed.Require(t)
	db := testbed.DynamoDB(t)
	table := testbed.Name(t, "hangar-controls")
	require.NoError(t, testbed.CreateTable(testbed.Context(t, time.Minute), db, table))
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	s, err := state.NewStore(db, table, fake.Account)
	require.NoError(t, err)
	s.Now = c.now
	return s
}

func TestLeaseContractFake(t *testing.T) {
	t.Parallel()
	c := newClock(time.Now())
	leaseContract(t, fakeControls(c), c)
}

func TestLeaseContractDynamoDB(t *testing.T) {
	t.Parallel()
	c := newClock(time.Now())
	leaseContract(t, dynamoControls(t, c), c)
}

// leaseContract: a lease is held by one holder until it gives it up or it runs out; of holders
// asking at once, one gets it.
func leaseContract(t *testing.T, s controls, c *clock) {
	ctx := testbed.Context(t, time.Minute)
	took := func(holder string) bool {
		t.Helper()
		ok, err := s.Lease(ctx, "launch/hangar/linux", holder, 2*time.Minute)
		require.NoError(t, err)
		return ok
	}
	require.True(t, took("a"), "no one holds it")
	require.False(t, took("b"), "a holds it")
	require.False(t, took("a"), "not taken twice, even by its holder")
	require.NoError(t, s.ReleaseLease(ctx, "launch/hangar/linux", "b"))
	require.False(t, took("b"), "only its holder gives it up")
	require.NoError(t, s.ReleaseLease(ctx, "launch/hangar/linux", "a"))
	require.True(t, took("b"), "given up: free")
	c.add(time.Minute)
	require.False(t, took("a"), "b's has a minute left")
	c.add(90 * time.Second)
	require.True(t, took("a"), "b's ran out")
	require.NoError(t, s.ReleaseLease(ctx, "never/taken", "a"), "giving up a lease no one took is harmless")
	_, err := s.Lease(ctx, "launch/hangar/linux", "a", 0)
	require.ErrorContains(t, err, "want a name, a holder and a positive duration")

	var won atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			ok, err := s.Lease(ctx, "launch/hangar/race", string(rune('a'+i)), time.Minute)
			if err == nil && ok {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int32(1), won.Load(), "one of eight at once")
}

func TestCursorContractFake(t *testing.T) {
	t.Parallel()
	cursorContract(t, fakeControls(newClock(time.Now())))
}

func TestCursorContractDynamoDB(t *testing.T) {
	t.Parallel()
	cursorContract(t, dynamoControls(t, newClock(time.Now())))
}

// cursorContract: a cursor moves only from where it is, forward; of movers at once, one moves it.
func cursorContract(t *testing.T, s controls) {
	ctx := testbed.Context(t, time.Minute)
	at := func() time.Time {
		t.Helper()
		cur, err := s.Cursor(ctx, "spend/linux")
		require.NoError(t, err)
		return cur
	}
	t1 := time.Now().Truncate(time.Millisecond)
	t2 := t1.Add(time.Minute)
	require.True(t, at().IsZero(), "never advanced")
	moved, err := s.AdvanceCursor(ctx, "spend/linux", t1, t2)
	require.NoError(t, err)
	require.False(t, moved, "not at t1")
	moved, err = s.AdvanceCursor(ctx, "spend/linux", time.Time{}, t1)
	require.NoError(t, err)
	require.True(t, moved)
	require.True(t, t1.Equal(at()), "at t1")
	moved, err = s.AdvanceCursor(ctx, "spend/linux", time.Time{}, t2)
	require.NoError(t, err)
	require.False(t, moved, "advanced already: not from zero")
	moved, err = s.AdvanceCursor(ctx, "spend/linux", t1, t2)
	require.NoError(t, err)
	require.True(t, moved)
	require.True(t, t2.Equal(at()))
	_, err = s.AdvanceCursor(ctx, "spend/linux", t2, t1)
	require.ErrorContains(t, err, "want a later position")

	var won atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			ok, err := s.AdvanceCursor(ctx, "spend/race", time.Time{}, t1)
			if err == nil && ok {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int32(1), won.Load(), "one of eight at once")
}
