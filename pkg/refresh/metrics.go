package refresh

import (
	"encoding/json"
	"fmt"
)

// Namespace is the CloudWatch namespace of Hangar's metrics.
const Namespace = "Hangar"

// emitMetrics writes one CloudWatch embedded-metric-format line for a pool: the Lambda's log
// becomes metrics with no PutMetricData call.
func (r *run) emitMetrics(p PoolReport) {
	if r.d.Metrics == nil {
		return
	}
	values := map[string]int{
		"IdleInstances": p.Idle, "StoppedInstances": p.Stopped, "WarmingInstances": p.Warming, "PoolDepth": p.Depth,
		"Expired": p.Expired, "Launched": p.Launched, "Stopped": p.Stops, "Errors": len(p.Errors),
		"HotTarget": p.Target.Hot, "StoppedTarget": p.Target.Stopped,
	}
	orphans := 0
	r.mu.Lock()
	orphans = r.report.Orphans
	r.mu.Unlock()
	var metrics []map[string]string
	line := map[string]any{"Stack": r.cfg.Stack, "Pool": p.Pool}
	for name, v := range values {
		metrics = append(metrics, map[string]string{"Name": name, "Unit": "Count"})
		line[name] = v
	}
	metrics = append(metrics, map[string]string{"Name": "Orphans", "Unit": "Count"})
	line["Orphans"] = orphans
	line["_aws"] = map[string]any{
		"Timestamp": r.d.Now().UnixMilli(),
		"CloudWatchMetrics": []map[string]any{{
			"Namespace": Namespace, "Dimensions": [][]string{{"Stack", "Pool"}}, "Metrics": metrics,
		}},
	}
	b, err := json.Marshal(line)
	if err != nil {
		return
	}
	_, _ = fmt.Fprintln(r.d.Metrics, string(b))
}
