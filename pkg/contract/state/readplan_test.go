package state

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReported(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		ms      []int64
		slowest bool
		want    time.Duration
	}{
		{"none", nil, false, 0},
		{"one without a report", []int64{100, 0, 300}, true, 0},
		{"median of three", []int64{300, 100, 200}, false, 220 * time.Millisecond},
		{"median of two is the longer", []int64{100, 200}, false, 220 * time.Millisecond},
		{"slowest", []int64{300, 100, 200}, true, 330 * time.Millisecond},
		{"one", []int64{50}, true, 55 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Reported(tt.ms, tt.slowest))
		})
	}
}

// TestFirstRead: the first read waits for the agents' reported time (the slowest for
// registration, the median for deregistration; a tenth and the plan's margin added), less the
// time since the ring and the poll's own first wait, capped; it is uninformed when one agent has
// not reported.
func TestFirstRead(t *testing.T) {
	t.Parallel()
	reg := func(ms ...int64) []Instance {
		var out []Instance
		for _, m := range ms {
			out = append(out, Instance{Report: Report{RegisterMs: m}})
		}
		return out
	}
	dereg := func(ms ...int64) []Instance {
		var out []Instance
		for _, m := range ms {
			out = append(out, Instance{Report: Report{DeregisterMs: m}})
		}
		return out
	}
	const interval = 200 * time.Millisecond // the poll's first wait is 50 ms
	ms := time.Millisecond
	tests := []struct {
		name     string
		plan     ReadPlan
		insts    []Instance
		since    time.Duration
		want     time.Duration
		informed bool
	}{
		{"registration: no report", Registration, reg(100, 0), 0, 0, false},
		{"registration: the slowest", Registration, reg(100, 300, 200), 0, 330*ms + 40*ms - 50*ms, true},
		{"registration: less the time since the ring", Registration, reg(300), 100 * ms, 330*ms + 40*ms - 100*ms - 50*ms, true},
		{"registration: a quick agent", Registration, reg(5), 0, 0, true},
		{"registration: capped", Registration, reg(60_000), 0, MaxPlannedRead, true},
		{"deregistration: one agent", Deregistration, dereg(100), 0, 110*ms + 60*ms - 50*ms, true},
		{"deregistration: the median", Deregistration, dereg(100, 400, 200), 0, 220*ms + 60*ms - 50*ms, true},
		{"deregistration: the upper median of an even count", Deregistration, dereg(100, 400, 200, 300), 0, 330*ms + 60*ms - 50*ms, true},
		{"deregistration: one never reported", Deregistration, dereg(300, 0), 0, 0, false},
		{"deregistration: an agent that says an hour", Deregistration, dereg(3_600_000), 0, MaxPlannedRead, true},
		{"the other act's report does not count", Deregistration, reg(100), 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, informed := tt.plan.First(tt.insts, tt.since, interval)
			require.Equal(t, tt.informed, informed)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestNextRead: the next read comes when the last open agent is expected to have registered,
// counting from its acknowledgement of the claim (from now when it has not acknowledged it yet,
// or its clock says a later time); the timing is left to the backoff without an estimate or
// once every open agent is overdue.
func TestNextRead(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ms := time.Millisecond
	awaited := map[string]Awaited{"a": {Version: 3}, "b": {Version: 5}}
	acked := func(version int64, ago time.Duration) *Instance {
		return &Instance{Report: Report{AckVersion: version, HeartbeatAt: now.Add(-ago)}}
	}
	due := Registration.DueMargin
	tests := []struct {
		name     string
		open     []string
		items    map[string]*Instance
		expected time.Duration
		want     time.Duration
	}{
		{"no estimate", []string{"a"}, map[string]*Instance{"a": acked(3, 10*ms)}, 0, 0},
		{"nothing open", nil, nil, 100 * ms, 0},
		{"the last acknowledgement counts", []string{"a", "b"},
			map[string]*Instance{"a": acked(3, 80*ms), "b": acked(5, 30*ms)}, 100 * ms, 70*ms + due},
		{"not acknowledged yet: from now", []string{"a", "b"},
			map[string]*Instance{"a": acked(3, 80*ms), "b": acked(4, 30*ms)}, 100 * ms, 100*ms + due},
		{"not read: from now", []string{"a"}, map[string]*Instance{}, 100 * ms, 100*ms + due},
		{"an acknowledgement from the future counts from now", []string{"a"},
			map[string]*Instance{"a": acked(3, -time.Hour)}, 100 * ms, 100*ms + due},
		{"every one overdue", []string{"a", "b"},
			map[string]*Instance{"a": acked(3, 300*ms), "b": acked(5, 200*ms)}, 100 * ms, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Registration.Next(tt.open, awaited, tt.items, tt.expected, now))
		})
	}
}

// TestExpected: the median of the agents' reported times, a tenth added, this run's answers
// replacing the earlier reports; zero when no agent has reported.
func TestExpected(t *testing.T) {
	t.Parallel()
	const run = "77"
	before := func(regMs int64) Awaited {
		return Awaited{Version: 4, Before: &Instance{Report: Report{RegisterMs: regMs}}}
	}
	registered := func(regMs, version int64) *Instance {
		return &Instance{Report: Report{Signal: SignalRegistered, SignalRun: run, SignalVersion: version, RegisterMs: regMs}}
	}
	tests := []struct {
		name    string
		awaited map[string]Awaited
		items   map[string]*Instance
		want    time.Duration
	}{
		{"no reports", map[string]Awaited{"a": before(0), "b": before(0)}, nil, 0},
		{"earlier reports", map[string]Awaited{"a": before(100), "b": before(300), "c": before(200)}, nil, 220 * time.Millisecond},
		{"this run's replace them", map[string]Awaited{"a": before(100), "b": before(300), "c": before(200)},
			map[string]*Instance{"a": registered(500, 4), "c": registered(400, 4)}, 440 * time.Millisecond},
		{"another assignment's report does not", map[string]Awaited{"a": before(100), "b": before(300), "c": before(200)},
			map[string]*Instance{"a": registered(500, 3), "c": registered(400, 3)}, 220 * time.Millisecond},
		{"a fresh agent's first report", map[string]Awaited{"a": before(0), "b": before(0)},
			map[string]*Instance{"b": registered(90, 4)}, 99 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Registration.Expected(tt.awaited, tt.items, run))
		})
	}
}
