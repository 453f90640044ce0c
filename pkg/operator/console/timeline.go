package console

import (
	"fmt"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/operator"
)

// timelineWidth is the width, in SVG units, of a run's timeline.
const timelineWidth = 480.0

// timeline is one run's instances on a common time axis: from the first claim (or creation for
// the run) to the last instance let go, or now while the run holds one.
type timeline struct {
	Span  string // the axis's length, as text
	Lanes []lane
}

// lane is one instance's service to the run.
type lane struct {
	Instance, Pool, Type, UsageClass string
	Reused                           bool
	Segments                         []segment
	// EndX is where the instance was let go (returned or terminated); Ended says it was, and
	// EndClass how ("returned", "terminated").
	EndX     float64
	Ended    bool
	EndClass string
	// Caption says the lane in words: each phase with its length, then how it ended.
	Caption string
	Cost    string
}

// segment is one phase of a lane: waiting (claimed or created, its runner not registered yet)
// or running (registered, serving the run's jobs).
type segment struct {
	Class string
	X, W  float64
	Title string
}

// newTimeline lays out run's instances; now ends the lanes still going.
func newTimeline(run operator.RunSummary, now time.Time) timeline {
	start, end := run.Started, now
	if !run.Ended.IsZero() {
		end = run.Ended
	}
	for _, h := range run.Held {
		if !h.AssignedAt.IsZero() && (start.IsZero() || h.AssignedAt.Before(start)) {
			start = h.AssignedAt
		}
	}
	span := end.Sub(start)
	if span < time.Second {
		span = time.Second
	}
	x := func(t time.Time) float64 {
		v := float64(t.Sub(start)) / float64(span) * timelineWidth
		return min(max(v, 0), timelineWidth)
	}
	tl := timeline{Span: roundDuration(span)}
	for _, h := range run.Held {
		l := lane{Instance: h.InstanceID, Pool: h.Pool, Type: h.Type, UsageClass: h.UsageClass, Reused: h.Claimed,
			Cost: heldCost(h)}
		stop := now
		if !h.EndedAt.IsZero() {
			stop = h.EndedAt
		}
		var words []string
		assigned := h.AssignedAt
		if assigned.IsZero() {
			assigned = start
		}
		waitEnd := h.Registered
		if waitEnd.IsZero() || waitEnd.After(stop) {
			waitEnd = stop
		}
		wait := "claimed"
		if !h.Claimed {
			wait = "created"
		}
		l.Segments = append(l.Segments, segment{Class: "waiting", X: x(assigned), W: x(waitEnd) - x(assigned),
			Title: fmt.Sprintf("%s, waiting for its runner: %s", wait, roundDuration(waitEnd.Sub(assigned)))})
		words = append(words, fmt.Sprintf("%s %s", wait, roundDuration(waitEnd.Sub(assigned))))
		if !h.Registered.IsZero() && h.Registered.Before(stop) {
			l.Segments = append(l.Segments, segment{Class: "running", X: x(h.Registered), W: x(stop) - x(h.Registered),
				Title: "running the run's jobs: " + roundDuration(stop.Sub(h.Registered))})
			words = append(words, "running "+roundDuration(stop.Sub(h.Registered)))
		}
		if !h.EndedAt.IsZero() {
			l.Ended, l.EndX = true, x(h.EndedAt)
			switch h.Outcome {
			case string(state.Terminated):
				l.EndClass = "terminated"
				words = append(words, "terminated ("+h.Reason+")")
			default:
				l.EndClass = "returned"
				words = append(words, "returned to the pool ("+h.Outcome+")")
			}
		} else {
			words = append(words, "still "+h.Outcome)
		}
		l.Caption = strings.Join(words, " → ")
		tl.Lanes = append(tl.Lanes, l)
	}
	return tl
}

// heldCost is one instance's cost to the run, or why there is none.
func heldCost(h operator.Held) string {
	if !h.PriceKnown {
		return "price unknown"
	}
	return operator.Dollars(h.Cost)
}

// roundDuration renders a duration to a tenth of a second below a minute, to the second above.
func roundDuration(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return d.Round(time.Second).String()
}
