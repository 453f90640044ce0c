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
	if w == nil || w.Out == nil || len(values) == 0 {
		return
	}
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	line := make(map[string]any, len(dims)+len(values)+1)
	for k, v := range dims {
		line[k] = v
	}
	names := slices.Sorted(maps.Keys(values))
	metrics := make([]map[string]string, 0, len(names))
	for _, name := range names {
		metrics = append(metrics, map[string]string{"Name": name, "Unit": "Count"})
		line[name] = values[name]
	}
	line["_aws"] = map[string]any{
		"Timestamp": now().UnixMilli(),
		"CloudWatchMetrics": []map[string]any{{
			"Namespace": Namespace, "Dimensions": [][]string{slices.Sorted(maps.Keys(dims))}, "Metrics": metrics,
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
