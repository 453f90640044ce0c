package spend

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// cursorStore is a Store of one cursor and the given records (with readErr), recording the
// windows read.
type cursorStore struct {
	at      time.Time
	reads   [][2]time.Time
	recs    []state.RunRecord
	readErr error
}

func (c *cursorStore) RunRecords(_ context.Context, _ string, since, until time.Time) ([]state.RunRecord, error) {
	c.reads = append(c.reads, [2]time.Time{since, until})
	return c.recs, c.readErr
}
func (c *cursorStore) Cursor(context.Context, string) (time.Time, error) { return c.at, nil }
func (c *cursorStore) AdvanceCursor(_ context.Context, _ string, from, to time.Time) (bool, error) {
	if !from.Equal(c.at) {
		return false, nil
	}
	c.at = to
	return true, nil
}

// TestWindow: a window runs from the cursor (at most MaxBacklog back) to Lag before now.
func TestWindow(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	until := now.Add(-2 * time.Minute)
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
			st := &cursorStore{at: tc.cursor}
			p, err := New(st, &bytes.Buffer{}, Config{Stack: "s", Now: func() time.Time { return now }})
			require.NoError(t, err)
			got, err := p.Publish(context.Background(), "pool")
			require.NoError(t, err)
			require.Equal(t, tc.from, got.From)
			require.Equal(t, until, got.Until)
			if tc.read {
				require.Equal(t, [][2]time.Time{{tc.from, until}}, st.reads)
				require.Equal(t, until, st.at, "the cursor moved to the window's end")
			} else {
				require.Empty(t, st.reads)
			}
		})
	}
	_, err := New(&cursorStore{}, &bytes.Buffer{}, Config{})
	require.ErrorContains(t, err, "Config.Stack is empty")
}

// TestMalformedRecordSkipped: a malformed record in the window is left out and named; the others
// are published and the cursor moves on, so one bad item cannot stop a pool's cost metrics.
func TestMalformedRecordSkipped(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	bad := fmt.Errorf("%w run#1#1#i-x: decode", state.ErrBadItem)
	st := &cursorStore{recs: []state.RunRecord{{Repo: "octo/app", AssignedAt: now.Add(-10 * time.Minute), EndedAt: now.Add(-5 * time.Minute),
		Spec: state.Spec{Price: 0.36, PriceSource: state.PriceOnDemand}}}, readErr: bad}
	var out bytes.Buffer
	p, err := New(st, &out, Config{Stack: "s", Now: func() time.Time { return now }})
	require.NoError(t, err)
	got, err := p.Publish(context.Background(), "pool")
	require.NoError(t, err)
	require.ErrorIs(t, got.Skipped, state.ErrBadItem)
	require.Len(t, got.Spend, 1)
	require.InDelta(t, 0.03, got.Spend[0].Cost, 1e-9, "5 minutes at $0.36 an hour")
	require.Contains(t, out.String(), `"Repository":"octo/app"`)
	require.Equal(t, now.Add(-2*time.Minute), st.at, "the cursor moved on")
}
