package ghfake_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-github/v66/github"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
)

// received is one delivery as the receiver saw it.
type received struct {
	headers http.Header
	event   github.WorkflowJobEvent
}

// receiver is a webhook endpoint that checks each delivery's signature with the secret (401 when
// it does not match), decodes it as go-github does, and answers status.
type receiver struct {
	secret string
	status atomic.Int32
	srv    *httptest.Server
	mu     sync.Mutex
	got    []received
}

func newReceiver(t *testing.T, secret string) *receiver {
	t.Helper()
	r := &receiver{secret: secret}
	r.status.Store(http.StatusOK)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mac := hmac.New(sha256.New, []byte(r.secret))
		mac.Write(body)
		if !hmac.Equal([]byte(req.Header.Get("X-Hub-Signature-256")), []byte("sha256="+hex.EncodeToString(mac.Sum(nil)))) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var ev github.WorkflowJobEvent
		if err := json.Unmarshal(body, &ev); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.got = append(r.got, received{headers: req.Header.Clone(), event: ev})
		r.mu.Unlock()
		w.WriteHeader(int(r.status.Load()))
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// forJob returns the deliveries received for job id, in order.
func (r *receiver) forJob(id int64) []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []received
	for _, d := range r.got {
		if d.event.GetWorkflowJob().GetID() == id {
			out = append(out, d)
		}
	}
	return out
}

// waitFor waits until n deliveries of job id have been received, and returns them.
func (r *receiver) waitFor(t *testing.T, id int64, n int) []received {
	t.Helper()
	require.Eventually(t, func() bool { return len(r.forJob(id)) >= n }, 30*time.Second, 10*time.Millisecond,
		"job %d: %d deliveries received, want %d", id, len(r.forJob(id)), n)
	return r.forJob(id)
}

func actions(rs []received) []string {
	out := make([]string, len(rs))
	for i, d := range rs {
		out[i] = d.event.GetAction()
	}
	return out
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestWebhookDeliveries: with a webhook, a job's life is delivered signed, in order, in the
// shape go-github decodes (queued, in_progress with its runner, completed with its conclusion);
// deliveries are recorded and can be redelivered, dropped, paused, and sent on demand.
func TestWebhookDeliveries(t *testing.T) {
	t.Parallel()
	s := ghfake.New("admin-token")
	defer s.Close()
	ctx := testCtx(t)
	s.EnableApp(appID)
	installation := s.Install("octo")
	s.SetOrg("octo")
	r := newReceiver(t, "s3cret")
	s.SetWebhook(r.srv.URL, "s3cret")

	cfg := jitConfig(t, s, "octo/app", "jit-hook", 1, "hook")
	job := s.QueueWorkflowJob("octo/app", 987654321, []string{"hook"}, "echo hi")
	p := startRun(t, runnerDir(t), "ACTIONS_RUNNER_INPUT_JITCONFIG="+cfg.GetEncodedJITConfig())
	require.Equal(t, 0, p.wait(t), p.stderr.String())

	got := r.waitFor(t, job, 3)
	require.Equal(t, []string{"queued", "in_progress", "completed"}, actions(got))
	for _, d := range got {
		require.Equal(t, "workflow_job", d.headers.Get("X-GitHub-Event"))
		require.Regexp(t, uuidV4, d.headers.Get("X-GitHub-Delivery"))
		require.NotEmpty(t, d.headers.Get("X-GitHub-Hook-ID"))
		require.Equal(t, "integration", d.headers.Get("X-GitHub-Hook-Installation-Target-Type"))
		require.Equal(t, "application/json", d.headers.Get("Content-Type"))
		require.Equal(t, "GitHub-Hookshot/ghfake", d.headers.Get("User-Agent"))
		ev := d.event
		require.Equal(t, installation, ev.GetInstallation().GetID())
		require.Equal(t, "octo/app", ev.GetRepo().GetFullName())
		require.Equal(t, "Organization", ev.GetRepo().GetOwner().GetType())
		require.Equal(t, "octo", ev.GetOrg().GetLogin())
		wj := ev.GetWorkflowJob()
		require.EqualValues(t, 987654321, wj.GetRunID())
		require.EqualValues(t, 1, wj.GetRunAttempt())
		require.Equal(t, []string{"hook"}, wj.Labels)
		require.Equal(t, d.event.GetAction(), wj.GetStatus())
	}
	queued, started, completed := got[0].event.GetWorkflowJob(), got[1].event.GetWorkflowJob(), got[2].event.GetWorkflowJob()
	require.Empty(t, queued.GetRunnerName())
	require.Zero(t, queued.GetRunnerID())
	require.Equal(t, "jit-hook", started.GetRunnerName())
	require.Equal(t, cfg.GetRunner().GetID(), started.GetRunnerID())
	require.EqualValues(t, 1, started.GetRunnerGroupID())
	require.Equal(t, "Default", started.GetRunnerGroupName())
	require.Equal(t, "success", completed.GetConclusion())
	require.Equal(t, "jit-hook", completed.GetRunnerName())
	require.False(t, completed.GetCompletedAt().IsZero())
	// The stand-in records a delivery once its answer is back, a moment after the receiver saw it.
	require.NoError(t, s.WaitDeliveries(ctx, 3))
	recorded := s.Deliveries()
	require.Len(t, recorded, 3)
	for _, d := range recorded {
		require.Equal(t, http.StatusOK, d.Status)
		require.NoError(t, d.Err)
		require.Equal(t, job, d.JobID)
	}

	// Redeliver: the same body under the same delivery id.
	require.NoError(t, s.Redeliver(recorded[2].ID))
	got = r.waitFor(t, job, 4)
	require.Equal(t, recorded[2].ID, got[3].headers.Get("X-GitHub-Delivery"))
	require.Equal(t, "completed", got[3].event.GetAction())
	require.NoError(t, s.WaitDeliveries(ctx, 4))
	require.Len(t, s.Deliveries(), 4)

	// A late, fresh delivery on demand; a receiver's failure is recorded and returned.
	id, err := s.SendJobEvent(job, "in_progress")
	require.NoError(t, err)
	got = r.waitFor(t, job, 5)
	require.Equal(t, id, got[4].headers.Get("X-GitHub-Delivery"))
	require.NotEqual(t, recorded[1].ID, id)
	r.status.Store(http.StatusInternalServerError)
	_, err = s.SendJobEvent(job, "completed")
	require.Error(t, err)
	all := s.Deliveries()
	require.Equal(t, http.StatusInternalServerError, all[len(all)-1].Status)
	r.status.Store(http.StatusOK)

	// Dropped: recorded, not sent; a redelivery sends it. A queued job cancelled: completed,
	// cancelled, no runner.
	s.DropDeliveries("queued", true)
	dropped := s.QueueJob("octo/app", []string{"nobody"}, "true")
	var droppedID string
	require.Eventually(t, func() bool {
		for _, d := range s.Deliveries() {
			if d.JobID == dropped && d.Action == "queued" {
				droppedID = d.ID
				return d.Dropped && d.Status == 0
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond)
	s.DropDeliveries("queued", false)
	s.CancelJob(dropped)
	got = r.waitFor(t, dropped, 1)
	require.Equal(t, "completed", got[0].event.GetAction())
	require.Equal(t, "cancelled", got[0].event.GetWorkflowJob().GetConclusion())
	require.Empty(t, got[0].event.GetWorkflowJob().GetRunnerName())
	j, _ := s.Job(dropped)
	require.Equal(t, "cancelled", j.Conclusion)
	require.NoError(t, s.Redeliver(droppedID))
	got = r.waitFor(t, dropped, 2)
	require.Equal(t, "queued", got[1].event.GetAction())
	require.Equal(t, droppedID, got[1].headers.Get("X-GitHub-Delivery"))

	// Paused: held back, then sent in order.
	s.PauseDeliveries()
	held := s.QueueJob("octo/app", []string{"nobody"}, "true")
	s.CancelJob(held)
	for _, d := range s.Deliveries() {
		require.NotEqual(t, held, d.JobID, "nothing is delivered while paused")
	}
	s.ResumeDeliveries()
	require.Equal(t, []string{"queued", "completed"}, actions(r.waitFor(t, held, 2)))
	require.NoError(t, s.WaitDeliveries(ctx, len(s.Deliveries())))

	// A repository the App is not installed on, of a user: no installation, no organisation.
	stranger := s.QueueJob("someone/repo", []string{"nobody"}, "true")
	ev := r.waitFor(t, stranger, 1)[0].event
	require.Nil(t, ev.GetInstallation())
	require.Nil(t, ev.GetOrg())
	require.Equal(t, "User", ev.GetRepo().GetOwner().GetType())
}

// TestNoWebhook: without SetWebhook, jobs are delivered nowhere.
func TestNoWebhook(t *testing.T) {
	t.Parallel()
	s := ghfake.New("admin-token")
	defer s.Close()
	s.CancelJob(s.QueueJob("octo/app", []string{"x"}, "true"))
	require.Empty(t, s.Deliveries())
	_, err := s.SendJobEvent(1, "queued")
	require.Error(t, err)
}
