package agent_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

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
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
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
	e := newEnv(t, envOptions{Baked: true})
	evil := newRecorder(t)
	id := e.launch(time.Time{})
	in := e.warm(id)

	owner, name, _ := strings.Cut(repo, "/")
	tok, _, err := e.GitHub.Actions.CreateRegistrationToken(e.ctx, owner, name)
	require.NoError(t, err)
	redirected := evil.URL + "/" + repo
	claimed := e.transition(state.Change{InstanceID: id, From: in.State, To: state.Claimed, Version: in.Version,
		Assign: &state.Assignment{RunID: "2301", RunAttempt: 1, Repo: repo, RunnerURL: redirected, RunnerPrefix: e.RunnerNames().Prefix()}})
	require.NoError(t, e.HandOver(e.ctx, claimed, tok.GetToken()))

	failed := e.waitSignal(id, state.SignalRegisterFailed, "2301", claimed.Version)
	require.Contains(t, failed.SignalLog, `runner URL "`+redirected+`"`, "the refusal names the URL")
	require.Contains(t, failed.SignalLog, "not on the pool's GitHub server "+e.GH.URL(), "and the pinned server")
	require.NotContains(t, failed.SignalLog, tok.GetToken())
	require.Empty(t, evil.requests(), "nothing was sent to the rewritten host")
	require.Empty(t, e.GH.Runners(""), "no runner registered")

	back := e.transition(state.Change{InstanceID: id, From: state.Claimed, To: state.Idle, Version: failed.Version, RunID: "2301"})
	again := e.claim(back, "2302")
	e.waitSignal(id, state.SignalRegistered, "2302", again.Version)
	require.Len(t, e.GH.Runners(repo), 1)
	require.Empty(t, evil.requests(), "nothing was sent to the rewritten host")
}
