package agent

import (
	"context"
	"log/slog"
	"time"
)

// strayInterval is how often a run's processes are looked for outside its cgroup: one read of
// /proc, a few milliseconds.
const strayInterval = 5 * time.Second

// watchStrays looks for the runner user's processes outside the run's cgroup every strayInterval
// until the returned stop is called (before the run is scrubbed): each one found is killed and
// reported, since it escaped the run's containment.
func (a *Agent) watchStrays(ctx context.Context, r Run, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for a.clock().Sleep(ctx, strayInterval) == nil {
			found, err := r.Strays()
			for _, s := range found {
				log.Error("a process of the runner user outside the run's cgroup: it escaped the run's containment; killed", "process", s)
			}
			if err != nil {
				log.Warn("look for the runner user's processes outside the run's cgroup", "error", err)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
