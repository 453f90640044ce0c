package refresh

import (
	"context"
	"sync"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/platform/metrics"
)

// publishSpend publishes, per pool, the cost of the runs that ended since it was last published
// (Deps.Spend). A failure is logged: the next refresh publishes the window again.
func (r *run) publishSpend(ctx context.Context, pools []*pooldoc.Document) {
	if r.d.Spend == nil || r.cfg.DryRun {
		return
	}
	var wg sync.WaitGroup
	for _, doc := range pools {
		wg.Go(func() {
			pub, err := r.d.Spend.Publish(ctx, doc.Name)
			switch {
			case err != nil:
				r.d.Log.Warn("refresh: publish the cost of ended runs", "pool", doc.Name, "error", err)
			case pub.Skipped != nil:
				r.d.Log.Warn("refresh: malformed run records left out of the cost", "pool", doc.Name, "error", pub.Skipped)
			}
		})
	}
	wg.Wait()
}

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
