package agent

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// recorder is a host a trusted repository controls: it records every request it receives.
type recorder struct {
	*httptest.Server
	mu  sync.Mutex
	got []string
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	r := &recorder{}
	r.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.got = append(r.got, req.Method+" "+req.URL.String())
		r.mu.Unlock()
		http.NotFound(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// TestRewrittenRunnerURL: a repository that may write items (the workflow role) rewrites a
// claimed item's runner URL to a host of its own; the run's registration token is handed over.
// The agent refuses it before sending anything: REGISTER_FAILED naming the URL and the pool's
// GitHub server, not one request at that host, no runner registered. The instance then serves an
// honest claim.
func TestRewrittenRunnerURL(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{Baked: true})
	evil := newRecorder(t)
	in := w.warm()

	const token = "AREGREWRITTEN0123456789"
	redirected := evil.URL + "/" + worldRepo
	claimed := w.assign(in, "2301", redirected, token)
	w.handOver(claimed, token)

	failed := w.waitSignal(state.SignalRegisterFailed, "2301", claimed.Version)
	require.Contains(t, failed.SignalLog, `runner URL "`+redirected+`"`, "the refusal names the URL")
	require.Contains(t, failed.SignalLog, "not on the pool's GitHub server "+worldGitHubURL, "and the pinned server")
	require.NotContains(t, failed.SignalLog, token)
	require.Empty(t, evil.requests(), "nothing was sent to the rewritten host")
	require.Empty(t, w.host.configures(), "config.sh never saw the rewritten URL")
	require.Empty(t, w.host.registrations(), "no runner registered")

	back := w.transition(state.Change{InstanceID: w.id, From: state.Claimed, To: state.Idle, Version: failed.Version, RunID: "2301"})
	again := w.claim(back, "2302")
	w.waitSignal(state.SignalRegistered, "2302", again.Version)
	require.Equal(t, []string{w.runnerName("2302")}, w.host.registrations())
	require.Equal(t, worldGitHubURL+"/"+worldRepo, w.host.configures()[0].url)
	require.Empty(t, evil.requests(), "nothing was sent to the rewritten host")
}
