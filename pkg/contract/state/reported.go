package state

import (
	"slices"
	"time"
)

// Reported is how long the agents of several instances said an act took them last time (their
// items' regMs or deregMs, in ms), plus a tenth: the median of the reports, or with slowest the
// longest. It is zero when any instance has no report (a fresh agent): the caller then polls from
// the start. The reports are the instances' own, so callers bound what they wait on them.
func Reported(ms []int64, slowest bool) time.Duration {
	if len(ms) == 0 || slices.Min(ms) <= 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(ms))
	d := time.Duration(sorted[len(sorted)/2]) * time.Millisecond
	if slowest {
		d = time.Duration(sorted[len(sorted)-1]) * time.Millisecond
	}
	return d + d/10
}
