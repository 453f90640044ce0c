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
