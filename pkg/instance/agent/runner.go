package agent

import (
	"strings"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// runnerProc is the run's runner (run.sh) as the agent follows it: done is closed once it has
// exited, err then says how; out keeps its output's tail.
type runnerProc struct {
	out  *tail
	done chan struct{}
	err  error
}

// startRunner starts the run's runner on the host, its jobs guarded to run (any run when empty)
// of repo; jitConfig, when set, is a just-in-time runner's configuration.
func startRunner(r Run, run, repo, jitConfig string) (*runnerProc, error) {
	p := &runnerProc{out: newTail(state.MaxLogTail), done: make(chan struct{})}
	err := r.Start(run, repo, jitConfig, p.out, func(err error) {
		p.err = err
		close(p.done)
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// exited reports whether the runner has ended.
func exited(p *runnerProc) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// redact hides secret in s: a registration token the runner's output may show.
func redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "***")
}
