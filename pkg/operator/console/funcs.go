package console

import (
	"fmt"
	"html/template"
	"time"

	"github.com/hangar-ci/hangar/pkg/operator"
)

// funcs are the templates' helpers: text for amounts, durations and times.
var funcs = template.FuncMap{
	"dollars":  operator.Dollars,
	"costText": operator.CostText,
	"seconds":  operator.SecondsText,
	"hours":    func(h float64) string { return fmt.Sprintf("%.3f", h) },
	"num":      func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"byLink":   byLink,
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
}
