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

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/refresh/spend"
)

const pool = "linux-x64"

var idSeq atomic.Uint64

func newID() string { return fmt.Sprintf("i-%017x", idSeq.Add(1)+uint64(time.Now().UnixNano())<<8) }

func newStore(t *testing.T) *state.Store {
	t.Helper()
	db := testbed.DynamoDB(t)
	name := testbed.Name(t, "hangar-spend")
	ctx := testbed.Context(t, time.Minute)
	require.NoError(t, testbed.CreateTable(ctx, db, name))
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name}) })
	s, err := state.NewStore(db, name, state.Account{Partition: "aws", Region: "us-east-1", ID: testbed.Account})
	require.NoError(t, err)
	return s
}

// serve runs an instance through a run of repo and gives it back, as release does: the give-back
// writes the run's record.
func serve(t *testing.T, s *state.Store, run, repo string, spec state.Spec) {
	t.Helper()
	ctx := testbed.Context(t, time.Minute)
	deadline := time.Now().Add(time.Hour)
	in := &state.Instance{ID: newID(), Pool: pool, Threshold: deadline, Spec: spec}
	require.NoError(t, s.Create(ctx, []*state.Instance{in}))
	idle, err := s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: pool, From: state.Created, To: state.Idle, Version: 1, Threshold: deadline})
	require.NoError(t, err)
	claimed, err := s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: pool, From: state.Idle, To: state.Claimed, Version: idle.Version,
		Threshold: deadline, Reuse: state.ReuseAny, Assign: &state.Assignment{RunID: run, RunAttempt: 1, Repo: repo}})
	require.NoError(t, err)
	out := s.TransitionAll(ctx, []state.Change{{InstanceID: in.ID, Pool: pool, From: state.Claimed, To: state.Idle, Version: claimed.Version,
		RunID: run, Threshold: deadline, Reason: "released by run " + run}}, []state.Instance{*claimed})
	require.NoError(t, out[0].Err)
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

// TestPublishOnce: the cost of the runs that ended is published per repository, with the pool's
// sum through a second dimension set, once, although two refreshes publish at the same moment;
// the next window holds only what ended since.
func TestPublishOnce(t *testing.T) {
	t.Parallel()
	testbed.Require(t)
	s := newStore(t)
	ctx := testbed.Context(t, time.Minute)
	start := time.Now().Add(-time.Second)
	priced := state.Spec{InstanceType: "c7i.large", UsageClass: state.UsageSpot, AZ: "us-east-1a", Price: 0.0357, PriceSource: state.PriceSpot}
	serve(t, s, "800", "octo/app", priced)
	serve(t, s, "801", "octo/app", priced)
	serve(t, s, "802", "octo/lib", state.Spec{InstanceType: "c7i.large", UsageClass: state.UsageOnDemand})
	recs, err := s.RunRecords(ctx, pool, start, time.Now().Add(time.Second))
	require.NoError(t, err)
	require.Len(t, recs, 3)
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
	now := time.Now().Add(3 * time.Minute)
	clock := func() time.Time { return now }
	var bufs [2]bytes.Buffer
	var got [2]*spend.Published
	var wg sync.WaitGroup
	for i := range 2 {
		p, err := spend.New(s, &bufs[i], spend.Config{Stack: "hangar", Now: clock})
		require.NoError(t, err)
		wg.Go(func() {
			got[i], err = p.Publish(ctx, pool)
			require.NoError(t, err)
		})
	}
	wg.Wait()
	var all []line
	for i := range 2 {
		all = append(all, lines(t, &bufs[i])...)
	}
	require.Len(t, all, 2, "one line per repository, from one refresh only: %+v", got)
	require.True(t, got[0].Taken || got[1].Taken || len(got[0].Spend) == 0 || len(got[1].Spend) == 0, "the other published nothing")
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
	require.Zero(t, byRepo["octo/app"].RunUnpricedSeconds)
	require.Zero(t, byRepo["octo/lib"].RunCostUSD, "no price: no cost, never a guess")
	require.InDelta(t, libSeconds, byRepo["octo/lib"].RunUnpricedSeconds, 1e-6)

	// A minute later: nothing new ended, nothing is published; a run that ends now is in the
	// window after the lag.
	var buf bytes.Buffer
	now = now.Add(time.Minute)
	p, err := spend.New(s, &buf, spend.Config{Stack: "hangar", Now: clock})
	require.NoError(t, err)
	next, err := p.Publish(ctx, pool)
	require.NoError(t, err)
	require.False(t, next.Taken)
	require.Empty(t, next.Spend)
	require.Empty(t, buf.String())
	// The store's clock follows the test's from here: run 803 ends after the cursor.
	now = now.Add(30 * time.Second)
	s.Now = clock
	serve(t, s, "803", "octo/lib", priced)
	now = now.Add(3 * time.Minute)
	next, err = p.Publish(ctx, pool)
	require.NoError(t, err)
	require.Len(t, next.Spend, 1)
	require.Equal(t, "octo/lib", next.Spend[0].Repo)
	require.Equal(t, 1, next.Spend[0].Records, "only the run that ended since")
}
