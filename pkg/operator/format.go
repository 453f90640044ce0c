package operator

import (
	"fmt"
	"time"
)

// Dollars renders an amount in US dollars: to the cent, or to the millionth below ten cents,
// where short CI runs cost fractions of a cent.
func Dollars(v float64) string {
	if v != 0 && v < 0.1 {
		return fmt.Sprintf("$%.6f", v)
	}
	return fmt.Sprintf("$%.2f", v)
}

// CostText renders a cost, saying how many instances it leaves out for want of a price.
func CostText(cost float64, unknown int) string {
	s := Dollars(cost)
	if unknown > 0 {
		s += fmt.Sprintf(" + %d price unknown", unknown)
	}
	return s
}

// SecondsText renders a duration in seconds to a tenth; "-" for none.
func SecondsText(s float64) string {
	if s == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f s", s)
}

// days renders a retention in whole days.
func days(d time.Duration) string {
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}
