package refresh

import "github.com/hangar-ci/hangar/pkg/metrics"

// emitMetrics writes one CloudWatch embedded-metric-format line for a pool.
func (r *run) emitMetrics(p PoolReport) {
	if r.d.Metrics == nil {
		return
	}
	r.mu.Lock()
	orphans := r.report.Orphans
	r.mu.Unlock()
	w := &metrics.Writer{Out: r.d.Metrics, Now: r.d.Now}
	w.Emit(map[string]string{"Stack": r.cfg.Stack, "Pool": p.Pool}, map[string]int{
		"IdleInstances": p.Idle, "StoppedInstances": p.Stopped, "WarmingInstances": p.Warming, "PoolDepth": p.Depth,
		"Expired": p.Expired, "Launched": p.Launched, "Stopped": p.Stops, "Errors": len(p.Errors),
		"HotTarget": p.Target.Hot, "StoppedTarget": p.Target.Stopped, "Orphans": orphans,
	})
}
