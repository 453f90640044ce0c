package agent

import (
	"bytes"
	"strings"
	"sync/atomic"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// runnerProc is the run's runner (run.sh) as the agent follows it: done is closed once it has
// exited, err then says how; out keeps its output's tail.
type runnerProc struct {
	out  *tail
	took atomic.Bool // the runner said it took a job
	done chan struct{}
	err  error
}

// tookJobLine is what the runner prints when GitHub gives it a job ("<time>: Running job: <name>").
var tookJobLine = []byte("Running job: ")

// jobWatch passes the runner's output on to the tail and notes when the runner says it took a
// job; carry keeps the end of the last write, for a line split across two.
type jobWatch struct {
	p     *runnerProc
	carry []byte
}

func (w *jobWatch) Write(b []byte) (int, error) {
	if !w.p.took.Load() {
		seen := append(w.carry, b...)
		if bytes.Contains(seen, tookJobLine) {
			w.p.took.Store(true)
		}
		w.carry = append(w.carry[:0], seen[max(0, len(seen)-len(tookJobLine)):]...)
	}
	return w.p.out.Write(b)
}

// startRunner starts the run's runner on the host, its jobs guarded to run (any run when empty)
// of repo; jitConfig, when set, is a just-in-time runner's configuration.
func startRunner(r Run, run, repo, jitConfig string) (*runnerProc, error) {
	p := &runnerProc{out: newTail(state.MaxLogTail), done: make(chan struct{})}
	err := r.Start(run, repo, jitConfig, &jobWatch{p: p}, func(err error) {
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
