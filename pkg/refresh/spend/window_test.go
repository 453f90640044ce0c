package spend_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/refresh/spend"
)

// TestWindow: a window runs from the cursor (at most MaxBacklog back) to Lag before now: of runs
// that ended just before it, at its start, just before its end and at its end, only the two
// within are published, and the cursor moves to its end.
func TestWindow(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	until := now.Add(-2 * time.Minute)
	spec := state.Spec{InstanceType: "c7i.large", UsageClass: state.UsageOnDemand, Price: 0.36, PriceSource: state.PriceOnDemand}
	for _, tc := range []struct {
		name   string
		cursor time.Time
		read   bool
		from   time.Time
	}{
		{"never published: the last hour", time.Time{}, true, until.Add(-time.Hour)},
		{"published a minute ago", until.Add(-time.Minute), true, until.Add(-time.Minute)},
		{"off for a day: the last hour", until.Add(-24 * time.Hour), true, until.Add(-time.Hour)},
		{"published up to the window's end: nothing to read", until, false, until},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := fake.NewStore(fake.Account)
			if !tc.cursor.IsZero() {
				moved, err := s.AdvanceCursor(ctx, "spend/"+pool, time.Time{}, tc.cursor)
				require.NoError(t, err)
				require.True(t, moved)
			}
			for _, at := range []time.Time{tc.from.Add(-time.Millisecond), tc.from, until.Add(-time.Millisecond), until} {
				ended(s, "900", "octo/app", spec, time.Minute, at)
			}
			p, err := spend.New(s, &bytes.Buffer{}, spend.Config{Stack: "s", Now: func() time.Time { return now }})
			require.NoError(t, err)
			got, err := p.Publish(ctx, pool)
			require.NoError(t, err)
			require.WithinDuration(t, tc.from, got.From, 0)
			require.WithinDuration(t, until, got.Until, 0)
			cur, err := s.Cursor(ctx, "spend/"+pool)
			require.NoError(t, err)
			if tc.read {
				require.Equal(t, 1, s.Calls("RunRecords"))
				require.Len(t, got.Spend, 1)
				require.Equal(t, 2, got.Spend[0].Records, "the runs that ended in [from, until)")
				require.True(t, until.Equal(cur), "the cursor moved to the window's end")
			} else {
				require.Zero(t, s.Calls("RunRecords"))
				require.Empty(t, got.Spend)
				require.True(t, tc.cursor.Equal(cur), "the cursor stays")
			}
		})
	}
	_, err := spend.New(fake.NewStore(fake.Account), &bytes.Buffer{}, spend.Config{})
	require.ErrorContains(t, err, "Config.Stack is empty")
}

// TestMalformedRecordSkipped: a malformed record in the window is left out and named; the others
// are published and the cursor moves on, so one bad item cannot stop a pool's cost metrics.
func TestMalformedRecordSkipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	s := fake.NewStore(fake.Account)
	ended(s, "1", "octo/app", state.Spec{Price: 0.36, PriceSource: state.PriceOnDemand}, 5*time.Minute, now.Add(-5*time.Minute))
	s.PutBadRunRecord(pool, "run#2#1#i-0000000000000bad0", now.Add(-4*time.Minute))
	var out bytes.Buffer
	p, err := spend.New(s, &out, spend.Config{Stack: "s", Now: func() time.Time { return now }})
	require.NoError(t, err)
	got, err := p.Publish(ctx, pool)
	require.NoError(t, err)
	require.ErrorIs(t, got.Skipped, state.ErrBadItem)
	require.ErrorContains(t, got.Skipped, "run#2#1#i-0000000000000bad0", "the bad record is named")
	require.Len(t, got.Spend, 1)
	require.InDelta(t, 0.03, got.Spend[0].Cost, 1e-9, "5 minutes at $0.36 an hour")
	require.Contains(t, out.String(), `"Repository":"octo/app"`)
	cur, err := s.Cursor(ctx, "spend/"+pool)
	require.NoError(t, err)
	require.True(t, now.Add(-2*time.Minute).Equal(cur), "the cursor moved on")
}
