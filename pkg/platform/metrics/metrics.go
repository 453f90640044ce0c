// Package metrics writes CloudWatch embedded-metric-format lines: a Lambda's log turns into
// metrics with no PutMetricData call (and no permission for one). Refresh, the webhook function
// and the dispatcher write theirs through it.
package metrics

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Namespace is the CloudWatch namespace of Hangar's metrics.
const Namespace = "Hangar"

// Writer writes metric lines to Out (a Lambda's stdout); a nil Writer, or one without Out,
// writes nothing. It is safe for concurrent use.
type Writer struct {
	Out io.Writer
	// Now stamps the lines; time.Now when nil.
	Now func() time.Time
	mu  sync.Mutex
}

// Emit writes one line: the counts in values (unit Count), under the dimensions dims (every key
// a dimension, in name order).
func (w *Writer) Emit(dims map[string]string, values map[string]int) {
	ms := make([]Metric, 0, len(values))
	for name, v := range values {
		ms = append(ms, Metric{Name: name, Unit: "Count", Value: float64(v)})
	}
	w.EmitAt(time.Time{}, dims, [][]string{slices.Sorted(maps.Keys(dims))}, ms)
}

// Metric is one value of a line, in its CloudWatch unit ("Count", "Seconds", "None").
type Metric struct {
	Name, Unit string
	Value      float64
}

// EmitAt writes one line stamped at (now when zero): the values, under every dimension set of
// sets (each a list of keys of dims). CloudWatch adds a line's values to the metric of each
// set, so lines per repository with sets {Stack, Pool, Repository} and {Stack, Pool} also sum
// to the pool's.
func (w *Writer) EmitAt(at time.Time, dims map[string]string, sets [][]string, values []Metric) {
	if w == nil || w.Out == nil || len(values) == 0 {
		return
	}
	if at.IsZero() {
		at = time.Now()
		if w.Now != nil {
			at = w.Now()
		}
	}
	line := make(map[string]any, len(dims)+len(values)+1)
	for k, v := range dims {
		line[k] = v
	}
	values = slices.Clone(values)
	slices.SortFunc(values, func(a, b Metric) int { return strings.Compare(a.Name, b.Name) })
	metrics := make([]map[string]string, 0, len(values))
	for _, m := range values {
		metrics = append(metrics, map[string]string{"Name": m.Name, "Unit": m.Unit})
		line[m.Name] = m.Value
	}
	line["_aws"] = map[string]any{
		"Timestamp": at.UnixMilli(),
		"CloudWatchMetrics": []map[string]any{{
			"Namespace": Namespace, "Dimensions": sets, "Metrics": metrics,
		}},
	}
	b, err := json.Marshal(line)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = fmt.Fprintln(w.Out, string(b))
}
