package console

import (
	"github.com/hangar-ci/hangar/pkg/operator"
)

// Chart geometry, in SVG units.
const (
	chartLabelWidth = 260.0
	chartBarWidth   = 420.0
	chartRowHeight  = 26.0
	chartMaxBars    = 20
)

// chart is a horizontal bar chart of cost: one bar per group, longest for the most expensive.
type chart struct {
	Width, Height float64
	BarX          float64
	Bars          []bar
	// More counts the groups left out of the chart (they are in the table).
	More int
}

type bar struct {
	// Label is the group's key, shortened to fit; Key in full (the bar's tooltip).
	Label, Key, Amount string
	Y, W               float64
	// TextY is the baseline of the bar's label and amount.
	TextY float64
	// Unknown says the group has instance-hours whose price is unknown (left out of the bar).
	Unknown bool
}

// newChart draws rows (most expensive first, or days in order) as bars scaled to the largest.
func newChart(rows []operator.CostRow) chart {
	shown := rows[:min(len(rows), chartMaxBars)]
	top := 0.0
	for _, r := range shown {
		top = max(top, r.Cost)
	}
	c := chart{Width: chartLabelWidth + chartBarWidth + 110, Height: float64(len(shown))*chartRowHeight + 8,
		BarX: chartLabelWidth, More: len(rows) - len(shown)}
	for k, r := range shown {
		w := 0.0
		if top > 0 {
			w = r.Cost / top * chartBarWidth
		}
		if r.Cost > 0 && w < 2 {
			w = 2 // a cost too small to see still shows
		}
		y := float64(k)*chartRowHeight + 4
		c.Bars = append(c.Bars, bar{Label: shorten(r.Key, 38), Key: r.Key, Amount: operator.Dollars(r.Cost), Y: y, W: w, TextY: y + chartRowHeight/2 + 4,
			Unknown: r.UnknownHours > 0})
	}
	return c
}

// shorten cuts s to n characters, ending it with an ellipsis when cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
