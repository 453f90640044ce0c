package spend_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/refresh/spend"
)

// These tests publish from the fake store's history (internal/testkit/fake): its run records,
// and its cursors with the conditional move of state.Store.AdvanceCursor.

const pool = "linux-x64"

var seq atomic.Int64

// ended writes the record of run, of repo, that held an instance of spec for held and ended at
// end, as the transition that ends a run writes it.
func ended(s *fake.Store, run, repo string, spec state.Spec, held time.Duration, end time.Time) state.RunRecord {
	id := fmt.Sprintf("i-%017x", 0x5e4d0000000+seq.Add(1))
	r := state.RunRecord{Key: "run#" + run + "#1#" + id, Run: run, RunAttempt: 1, Repo: repo, InstanceID: id, Pool: pool,
		Claimed: true, AssignedAt: end.Add(-held), EndedAt: end, Outcome: string(state.Idle), Reason: "released by run " + run, Spec: spec}
	s.PutRunRecord(r)
	return r
}

// line is one embedded-metric-format line as CloudWatch reads it.
type line struct {
	AWS struct {
		Timestamp         int64
		CloudWatchMetrics []struct {
			Namespace  string
			Dimensions [][]string
			Metrics    []struct{ Name, Unit string }
		}
	} `json:"_aws"`
	Stack, Pool, Repository                            string
	RunCostUSD, RunInstanceSeconds, RunUnpricedSeconds float64
}

func lines(t *testing.T, b *bytes.Buffer) []line {
	t.Helper()
	var out []line
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m line
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out
}

// together holds each publisher's move of the cursor until every one of them has read its window,
// as two refreshes at the same moment do: both read the same cursor, both race to move it.
type together struct {
	*fake.Store
	read *sync.WaitGroup
}

func (s together) RunRecords(ctx context.Context, pool string, since, until time.Time) ([]state.RunRecord, error) {
	out, err := s.Store.RunRecords(ctx, pool, since, until)
	s.read.Done()
	s.read.Wait()
	return out, err
}

// TestPublishOnce: the cost of the runs that ended is published per repository, with the pool's
// sum through a second dimension set, once, although two refreshes publish at the same moment;
// the next window holds only what ended since.
func TestPublishOnce(t *testing.T) {
	t.Parallel()
	s := fake.NewStore(fake.Account)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := time.Now()
	priced := state.Spec{InstanceType: "c7i.large", UsageClass: state.UsageSpot, AZ: "us-east-1a", Price: 0.0357, PriceSource: state.PriceSpot}
	recs := []state.RunRecord{
		ended(s, "800", "octo/app", priced, 7*time.Minute, base.Add(-40*time.Second)),
		ended(s, "801", "octo/app", priced, 3*time.Minute, base.Add(-20*time.Second)),
		ended(s, "802", "octo/lib", state.Spec{InstanceType: "c7i.large", UsageClass: state.UsageOnDemand}, 5*time.Minute, base),
	}
	var appCost, appSeconds, libSeconds float64
	for _, r := range recs {
		if r.Repo == "octo/app" {
			c, ok := r.Cost()
			require.True(t, ok)
			appCost, appSeconds = appCost+c, appSeconds+r.Seconds()
		} else {
			libSeconds += r.Seconds()
		}
	}
	require.Positive(t, appCost)

	// Two refreshes, three minutes on (past the lag), at the same moment.
	now := base.Add(3 * time.Minute)
	var mu sync.Mutex
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	var bufs [2]bytes.Buffer
	var got [2]*spend.Published
	var errs [2]error
	var read, wg sync.WaitGroup
	read.Add(2)
	for i := range 2 {
		p, err := spend.New(together{Store: s, read: &read}, &bufs[i], spend.Config{Stack: "hangar", Now: clock})
		require.NoError(t, err)
		wg.Go(func() { got[i], errs[i] = p.Publish(ctx, pool) })
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	var all []line
	for i := range 2 {
		all = append(all, lines(t, &bufs[i])...)
	}
	require.Len(t, all, 2, "one line per repository, from one refresh only: %+v", got)
	require.True(t, got[0].Taken != got[1].Taken, "the other lost the cursor's move and published nothing: %+v", got)
	byRepo := map[string]line{}
	for _, l := range all {
		byRepo[l.Repository] = l
		require.Equal(t, "hangar", l.Stack)
		require.Equal(t, pool, l.Pool)
		require.Equal(t, now.Add(-2*time.Minute).Truncate(time.Millisecond).UnixMilli(), l.AWS.Timestamp, "stamped at the window's end")
		require.Len(t, l.AWS.CloudWatchMetrics, 1)
		cw := l.AWS.CloudWatchMetrics[0]
		require.Equal(t, "Hangar", cw.Namespace)
		require.Equal(t, [][]string{{"Stack", "Pool", "Repository"}, {"Stack", "Pool"}}, cw.Dimensions, "per repository, and summed per pool")
		require.ElementsMatch(t, []string{"RunCostUSD", "RunInstanceSeconds", "RunUnpricedSeconds"},
			[]string{cw.Metrics[0].Name, cw.Metrics[1].Name, cw.Metrics[2].Name})
	}
	require.InDelta(t, appCost, byRepo["octo/app"].RunCostUSD, 1e-12)
	require.InDelta(t, appSeconds, byRepo["octo/app"].RunInstanceSeconds, 1e-6)
	require.InDelta(t, 600.0, appSeconds, 1e-6, "7 and 3 minutes")
	require.Zero(t, byRepo["octo/app"].RunUnpricedSeconds)
	require.Zero(t, byRepo["octo/lib"].RunCostUSD, "no price: no cost, never a guess")
	require.InDelta(t, libSeconds, byRepo["octo/lib"].RunUnpricedSeconds, 1e-6)
	cur, err := s.Cursor(ctx, "spend/"+pool)
	require.NoError(t, err)
	require.Equal(t, now.Add(-2*time.Minute).Truncate(time.Millisecond).UnixMilli(), cur.UnixMilli(), "the cursor at the window's end")

	// A minute later: nothing new ended, nothing is published; a run that ends now is in the
	// window after the lag.
	var buf bytes.Buffer
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	p, err := spend.New(s, &buf, spend.Config{Stack: "hangar", Now: clock})
	require.NoError(t, err)
	next, err := p.Publish(ctx, pool)
	require.NoError(t, err)
	require.False(t, next.Taken)
	require.Empty(t, next.Spend)
	require.Empty(t, buf.String())
	// Run 803 ends after the cursor.
	mu.Lock()
	now = now.Add(30 * time.Second)
	mu.Unlock()
	ended(s, "803", "octo/lib", priced, time.Minute, clock())
	mu.Lock()
	now = now.Add(3 * time.Minute)
	mu.Unlock()
	next, err = p.Publish(ctx, pool)
	require.NoError(t, err)
	require.Len(t, next.Spend, 1)
	require.Equal(t, "octo/lib", next.Spend[0].Repo)
	require.Equal(t, 1, next.Spend[0].Records, "only the run that ended since")
	require.Len(t, lines(t, &buf), 1)
}
