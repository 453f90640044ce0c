package ghfake_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v66/github"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
)

// syncBuffer is a bytes.Buffer safe to read while a process writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runnerProc is a stand-in run.sh started by a test.
type runnerProc struct {
	cmd    *exec.Cmd
	stdout syncBuffer
	stderr syncBuffer
	done   chan struct{}
	err    error
}

// startRun starts run.sh in runner directory dir with env added to the test's environment; the
// process is killed at the end of the test if it is still running.
func startRun(t *testing.T, dir string, env ...string) *runnerProc {
	t.Helper()
	p := &runnerProc{cmd: exec.Command(filepath.Join(dir, "run.sh")), done: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	require.NoError(t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits for the runner to exit and returns its exit code; the test fails if it has not
// exited within a generous deadline.
func (p *runnerProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("run.sh did not exit\nstdout:\n%s\nstderr:\n%s", p.stdout.String(), p.stderr.String())
	}
	var exit *exec.ExitError
	if errors.As(p.err, &exit) {
		return exit.ExitCode()
	}
	require.NoError(t, p.err)
	return 0
}

// testCtx is a context for one test's requests, ended with the test.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// statusOf returns the HTTP status of a go-github error (0 when it is not GitHub's answer).
func statusOf(err error) int {
	var e *github.ErrorResponse
	if errors.As(err, &e) && e.Response != nil {
		return e.Response.StatusCode
	}
	return 0
}

// messageOf returns the message of a go-github error.
func messageOf(err error) string {
	var e *github.ErrorResponse
	if errors.As(err, &e) {
		return e.Message
	}
	return ""
}

// jitConfig makes a just-in-time runner in scope (owner or owner/repo) with the admin token.
func jitConfig(t *testing.T, s *ghfake.Server, scope, name string, group int64, labels ...string) *github.JITRunnerConfig {
	t.Helper()
	gh := client(t, s, "admin-token")
	req := &github.GenerateJITConfigRequest{Name: name, RunnerGroupID: group, Labels: labels}
	owner, repo, isRepo := cutScope(scope)
	var (
		cfg *github.JITRunnerConfig
		err error
	)
	if isRepo {
		cfg, _, err = gh.Actions.GenerateRepoJITConfig(testCtx(t), owner, repo, req)
	} else {
		cfg, _, err = gh.Actions.GenerateOrgJITConfig(testCtx(t), owner, req)
	}
	require.NoError(t, err)
	return cfg
}

func cutScope(scope string) (owner, repo string, isRepo bool) {
	for i := range scope {
		if scope[i] == '/' {
			return scope[:i], scope[i+1:], true
		}
	}
	return scope, "", false
}

// waitStatus waits until job id has status.
func waitStatus(t *testing.T, s *ghfake.Server, id int64, status string) {
	t.Helper()
	require.Eventually(t, func() bool {
		j, _ := s.Job(id)
		return j.Status == status
	}, 30*time.Second, 20*time.Millisecond, "job %d never %s", id, status)
}

// rawPost posts body to the stand-in with an Authorization header (none when auth is empty).
func rawPost(t *testing.T, s *ghfake.Server, path, auth string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, s.URL()+path, bytes.NewReader(body))
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := s.HTTPClient().Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}
