package metrics

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEmitWritesEmbeddedMetricFormat: a line is one JSON object CloudWatch turns into metrics:
// the dimensions and values at the top, and under _aws the namespace, the dimension sets, each
// metric's name and unit, and the time.
func TestEmitWritesEmbeddedMetricFormat(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	at := time.UnixMilli(1_790_000_000_000)
	w := &Writer{Out: &out, Now: func() time.Time { return at }}
	w.Emit(map[string]string{"Stack": "hangar", "Pool": "linux"}, map[string]int{"JobsReused": 2, "JobsCreated": 1})
	w.EmitAt(at.Add(time.Second), map[string]string{"Stack": "hangar", "Pool": "linux", "Repository": "octo/app"},
		[][]string{{"Pool", "Repository", "Stack"}, {"Pool", "Stack"}}, []Metric{{Name: "CostUSD", Unit: "None", Value: 0.25}})

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2, "one line per emit")
	var first map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	require.Equal(t, "hangar", first["Stack"])
	require.EqualValues(t, 2, first["JobsReused"])
	require.EqualValues(t, 1, first["JobsCreated"])
	meta := first["_aws"].(map[string]any)
	require.EqualValues(t, at.UnixMilli(), meta["Timestamp"])
	cw := meta["CloudWatchMetrics"].([]any)[0].(map[string]any)
	require.Equal(t, Namespace, cw["Namespace"])
	require.Equal(t, []any{[]any{"Pool", "Stack"}}, cw["Dimensions"], "every key a dimension, in name order")
	require.Equal(t, []any{map[string]any{"Name": "JobsCreated", "Unit": "Count"}, map[string]any{"Name": "JobsReused", "Unit": "Count"}},
		cw["Metrics"], "counts, in name order")

	var second map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &second))
	require.EqualValues(t, 0.25, second["CostUSD"])
	require.Len(t, second["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Dimensions"], 2,
		"a line's values count under each dimension set")
}

// TestEmitNothing: a nil writer, one without Out, and a line without values write nothing.
func TestEmitNothing(t *testing.T) {
	t.Parallel()
	var nilWriter *Writer
	nilWriter.Emit(map[string]string{"Stack": "x"}, map[string]int{"N": 1})
	(&Writer{}).Emit(map[string]string{"Stack": "x"}, map[string]int{"N": 1})
	var out bytes.Buffer
	(&Writer{Out: &out}).Emit(map[string]string{"Stack": "x"}, nil)
	require.Empty(t, out.String())
}
