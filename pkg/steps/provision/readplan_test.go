package provision

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestNextRead: the wait reads again when the last open agent is expected to have registered,
// counting from its acknowledgement of the claim (from now when it has not acknowledged it yet,
// or its clock says a later time); it leaves the timing to the backoff without an estimate or
// once every open agent is overdue.
func TestNextRead(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ms := time.Millisecond
	claims := map[string]claimReport{"a": {version: 3}, "b": {version: 5}}
	acked := func(version int64, ago time.Duration) *state.Instance {
		return &state.Instance{Report: state.Report{AckVersion: version, HeartbeatAt: now.Add(-ago)}}
	}
	tests := []struct {
		name  string
		open  []string
		items map[string]*state.Instance
		reg   time.Duration
		want  time.Duration
	}{
		{"no estimate", []string{"a"}, map[string]*state.Instance{"a": acked(3, 10*ms)}, 0, 0},
		{"nothing open", nil, nil, 100 * ms, 0},
		{"the last acknowledgement counts", []string{"a", "b"},
			map[string]*state.Instance{"a": acked(3, 80*ms), "b": acked(5, 30*ms)}, 100 * ms, 70*ms + dueMargin},
		{"not acknowledged yet: from now", []string{"a", "b"},
			map[string]*state.Instance{"a": acked(3, 80*ms), "b": acked(4, 30*ms)}, 100 * ms, 100*ms + dueMargin},
		{"not read: from now", []string{"a"}, map[string]*state.Instance{}, 100 * ms, 100*ms + dueMargin},
		{"an acknowledgement from the future counts from now", []string{"a"},
			map[string]*state.Instance{"a": acked(3, -time.Hour)}, 100 * ms, 100*ms + dueMargin},
		{"every one overdue", []string{"a", "b"},
			map[string]*state.Instance{"a": acked(3, 300*ms), "b": acked(5, 200*ms)}, 100 * ms, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, nextRead(tt.open, claims, tt.items, tt.reg, now))
		})
	}
}

// TestExpectedRegistration: the median of the agents' reported registration times, a tenth
// added, this run's reports replacing the earlier ones; zero when no agent has reported.
func TestExpectedRegistration(t *testing.T) {
	t.Parallel()
	const run = "77"
	m := func(regMs int64) claimReport { return claimReport{version: 4, regMs: regMs} }
	registered := func(regMs, version int64) *state.Instance {
		return &state.Instance{Report: state.Report{Signal: state.SignalRegistered, SignalRun: run, SignalVersion: version, RegisterMs: regMs}}
	}
	tests := []struct {
		name   string
		claims map[string]claimReport
		items  map[string]*state.Instance
		want   time.Duration
	}{
		{"no reports", map[string]claimReport{"a": m(0), "b": m(0)}, nil, 0},
		{"earlier reports", map[string]claimReport{"a": m(100), "b": m(300), "c": m(200)}, nil, 220 * time.Millisecond},
		{"this run's replace them", map[string]claimReport{"a": m(100), "b": m(300), "c": m(200)},
			map[string]*state.Instance{"a": registered(500, 4), "c": registered(400, 4)}, 440 * time.Millisecond},
		{"another assignment's report does not", map[string]claimReport{"a": m(100), "b": m(300), "c": m(200)},
			map[string]*state.Instance{"a": registered(500, 3), "c": registered(400, 3)}, 220 * time.Millisecond},
		{"a fresh agent's first report", map[string]claimReport{"a": m(0), "b": m(0)},
			map[string]*state.Instance{"b": registered(90, 4)}, 99 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, expectedRegistration(tt.claims, tt.items, run))
		})
	}
}
