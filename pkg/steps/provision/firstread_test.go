package provision

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestFirstRead: the wait's first read of a claim waits for the slowest agent's reported
// registration time (regMs, plus a tenth and the margin, from the hand-over, less the poll's own
// first wait), capped; it does not wait at all when an instance was created or an agent has not
// reported.
func TestFirstRead(t *testing.T) {
	t.Parallel()
	claimed := func(regMs int64) *member {
		return &member{inst: state.Instance{Report: state.Report{RegisterMs: regMs}}, reused: true}
	}
	tests := []struct {
		name     string
		members  []*member
		want     time.Duration
		informed bool
	}{
		{"no report", []*member{claimed(100), claimed(0)}, 0, false},
		{"a created instance", []*member{claimed(100), {inst: state.Instance{Report: state.Report{RegisterMs: 100}}}}, 0, false},
		{"the slowest", []*member{claimed(100), claimed(300), claimed(200)}, 330*time.Millisecond + firstReadMargin - 25*time.Millisecond, true},
		{"a quick agent", []*member{claimed(5)}, 5500*time.Microsecond + firstReadMargin - 25*time.Millisecond, true},
		{"capped", []*member{claimed(60_000)}, maxFirstRead, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &provisioning{cfg: Config{PollInterval: 200 * time.Millisecond}, handedAt: time.Now()}
			got, informed := p.firstRead(tt.members)
			require.Equal(t, tt.informed, informed)
			require.LessOrEqual(t, got, tt.want)
			require.GreaterOrEqual(t, got, max(tt.want-time.Second, 0), "less only by the time since the hand-over")
		})
	}
}
