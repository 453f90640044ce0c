package webhook_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/labels/webhook"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/platform/metrics"
)

const secret = "a-webhook-secret-of-some-length"

// jobsQueue is the jobs queue the handler sends to (the fake SQS's).
const jobsQueue = "https://sqs.us-east-1.amazonaws.com/123456789012/hangar-jobs"

// queued returns the messages the handler put on the jobs queue.
func (w *world) queued(t *testing.T) []jobs.Message {
	t.Helper()
	var out []jobs.Message
	for _, b := range w.q.Bodies(jobsQueue) {
		m, err := jobs.Parse(b)
		require.NoError(t, err)
		out = append(out, m)
	}
	return out
}

// pools is the stack's documents: the stack serves installation 11 and the repositories of octo
// and other; pool small allows octo/* only.
type pools struct{ table string }

func (p pools) LoadStack(context.Context) (*pooldoc.Stack, error) {
	stack := []string{"octo/*", "other/*"}
	mk := func(name string, allowed []string, labels ...string) *pooldoc.Document {
		return &pooldoc.Document{Name: name, AllowedRepositories: allowed,
			Jobs: &pooldoc.Jobs{StackLabel: "hangar", Labels: labels, Installations: []int64{11}}}
	}
	return &pooldoc.Stack{Name: "hangar", Table: p.table, Account: state.Account{Partition: "aws", Region: "us-east-1", ID: testbed.Account},
		Pools: []*pooldoc.Document{mk("small", []string{"octo/*"}, "linux-x64"), mk("large", stack, "linux-x64", "large"),
			mk("gpu-a", stack, "gpu", "a"), mk("gpu-b", stack, "gpu", "b")}}, nil
}

// noDB fails every request: refused deliveries must make none.
type noDB struct {
	awsapi.DynamoDB
	calls atomic.Int64
}

func (d *noDB) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	d.calls.Add(1)
	return nil, errors.New("no request was expected")
}

type world struct {
	h       *webhook.Handler
	q       *fake.SQS
	log     *bytes.Buffer
	metrics *testbed.Buffer
}

func newWorld(t *testing.T, db awsapi.DynamoDB, table string) *world {
	t.Helper()
	w := &world{q: &fake.SQS{}, log: &bytes.Buffer{}, metrics: &testbed.Buffer{}}
	var mu sync.Mutex
	h, err := webhook.New(webhook.Config{Stack: "hangar", JobsQueueURL: jobsQueue}, webhook.Deps{
		Secret: func(context.Context, bool) ([][]byte, error) { return [][]byte{[]byte(secret)}, nil },
		Queue:  w.q, Pools: pools{table: table}, DynamoDB: db,
		Log:     slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: w.log}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics: &metrics.Writer{Out: w.metrics},
	})
	require.NoError(t, err)
	w.h = h
	return w
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func sign(body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// payload is a workflow_job delivery's body as GitHub sends it, through installation 11.
func payload(action string, job int64, repo string, labels []string, runner string) []byte {
	return payloadVia(11, action, job, repo, labels, runner)
}

// payloadVia is payload through another installation.
func payloadVia(installation int64, action string, job int64, repo string, labels []string, runner string) []byte {
	wj := map[string]any{"id": job, "run_id": 900 + job, "run_attempt": 1, "status": action, "labels": labels}
	if runner != "" {
		wj["runner_name"], wj["runner_id"] = runner, 77
	}
	b, _ := json.Marshal(map[string]any{"action": action, "workflow_job": wj,
		"repository": map[string]any{"id": 1000 + len(repo), "full_name": repo, "name": repo[strings.Index(repo, "/")+1:]}, "installation": map[string]any{"id": installation}})
	return b
}

func request(body []byte, mutate func(http.Header)) webhook.Request {
	h := http.Header{}
	h.Set(webhook.HeaderEvent, "workflow_job")
	h.Set(webhook.HeaderDelivery, "d-1")
	h.Set(webhook.HeaderSignature, sign(body))
	if mutate != nil {
		mutate(h)
	}
	return webhook.Request{Method: http.MethodPost, Headers: h, Body: body}
}

// TestBadInput: every malformed, forged or oversized delivery is answered with the right status
// and a line that says why, and nothing is recorded or queued.
func TestBadInput(t *testing.T) {
	t.Parallel()
	good := payload("queued", 1, "octo/app", []string{"hangar", "linux-x64"}, "")
	big := append(payload("queued", 1, "octo/app", []string{"hangar", "linux-x64"}, ""), bytes.Repeat([]byte(" "), webhook.DefaultMaxBody)...)
	tests := []struct {
		name   string
		req    webhook.Request
		status int
		says   string
	}{
		{"no signature", request(good, func(h http.Header) { h.Del(webhook.HeaderSignature) }), 401, "no X-Hub-Signature-256"},
		{"wrong signature", request(good, func(h http.Header) { h.Set(webhook.HeaderSignature, "sha256="+strings.Repeat("0", 64)) }), 401, "does not match"},
		{"sha1 signature", request(good, func(h http.Header) { h.Set(webhook.HeaderSignature, "sha1=abc") }), 401, "want sha256=<hex>"},
		{"altered body", webhook.Request{Method: "POST", Headers: request(good, nil).Headers, Body: bytes.Replace(good, []byte("octo/app"), []byte("evil/app"), 1)}, 401, "does not match"},
		{"too big", request(big, nil), 413, "want at most"},
		{"GET", webhook.Request{Method: http.MethodGet, Headers: request(good, nil).Headers, Body: good}, 405, "want POST"},
		{"not JSON", request([]byte("{not json"), nil), 400, "not a workflow_job payload"},
		{"unknown action", request(payload("exploded", 1, "octo/app", []string{"hangar"}, ""), nil), 400, `action "exploded"`},
		{"no job id", request(payload("queued", 0, "octo/app", []string{"hangar"}, ""), nil), 400, "workflow_job.id"},
		{"bad repository", request(payload("queued", 1, "octo/../x", []string{"hangar"}, ""), nil), 400, "repository.full_name"},
		{"no repository id", request(bytes.Replace(payload("queued", 1, "octo/app", []string{"hangar"}, ""), []byte(`"id":1008,`), nil, 1), nil), 400, "repository.id: missing"},
		{"another event", request(good, func(h http.Header) { h.Set(webhook.HeaderEvent, "push") }), 202, `event "push" ignored`},
		{"ping", request(good, func(h http.Header) { h.Set(webhook.HeaderEvent, "ping") }), 200, "pong"},
		{"waiting", request(payload("waiting", 1, "octo/app", []string{"hangar"}, ""), nil), 202, "waiting ignored"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := &noDB{}
			w := newWorld(t, db, "t")
			resp := w.h.Handle(context.Background(), tc.req)
			require.Equal(t, tc.status, resp.Status, resp.Body)
			require.Contains(t, resp.Body, tc.says)
			require.Contains(t, w.log.String(), strings.ReplaceAll(tc.says, `"`, `\"`), "the log line says why")
			require.Zero(t, db.calls.Load(), "nothing recorded")
			require.Empty(t, w.queued(t), "nothing queued")
		})
	}
}

// TestTrustSet: a signed delivery of the stack's from a repository or an installation outside the
// trust set is refused with 403 before anything is recorded or queued, whatever its action or
// labels, and counted; one of another runner's job is left alone. (A job outside the set that
// took one of the stack's runners is passed on: TestRouting.)
func TestTrustSet(t *testing.T) {
	t.Parallel()
	ours := []string{"self-hosted", "hangar", "linux-x64"}
	tests := []struct {
		name   string
		body   []byte
		status int
		reason string
	}{
		{"queued, outside repository", payload("queued", 1, "someone-else/fork-playground", ours, ""), 403, jobs.ReasonRepository},
		{"queued, outside repository of a wider pool", payload("queued", 1, "evil/app", []string{"hangar", "large"}, ""), 403, jobs.ReasonRepository},
		{"queued, outside installation", payloadVia(424242, "queued", 1, "octo/app", ours, ""), 403, jobs.ReasonInstallation},
		{"queued, outside repository, labels of no pool", payload("queued", 1, "evil/app", []string{"hangar", "junk"}, ""), 403, jobs.ReasonRepository},
		{"in progress elsewhere, outside repository", payload("in_progress", 1, "evil/app", ours, "someone-elses"), 403, jobs.ReasonRepository},
		{"completed, outside installation", payloadVia(424242, "completed", 1, "octo/app", ours, "someone-elses"), 403, jobs.ReasonInstallation},
		{"another runner's job, outside repository", payload("queued", 1, "evil/app", []string{"self-hosted", "linux"}, ""), 202, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := &noDB{}
			w := newWorld(t, db, "t")
			resp := w.h.Handle(context.Background(), request(tc.body, nil))
			require.Equal(t, tc.status, resp.Status, resp.Body)
			require.Zero(t, db.calls.Load(), "nothing recorded")
			require.Empty(t, w.queued(t), "nothing queued")
			require.NotContains(t, w.metrics.String(), "JobsUnrouted", "the outside sets off no unrouted alarm")
			if tc.reason != "" {
				require.Contains(t, resp.Body, "job refused")
				require.Contains(t, w.metrics.String(), fmt.Sprintf(`"Reason":"%s"`, tc.reason))
				require.Contains(t, w.metrics.String(), `"WebhooksRefused":1`)
			}
		})
	}
}

// brokenPools cannot read the stack's pool documents.
type brokenPools struct{}

func (brokenPools) LoadStack(context.Context) (*pooldoc.Stack, error) {
	return nil, errors.New("ssm: throttled")
}

// TestStackSideFailures: a delivery the stack fails on its side (the webhook secret or the pool
// documents unreadable) is answered 5xx, records and queues nothing, and counts WebhookErrors by
// reason: GitHub does not deliver it again by itself, so the alarm must tell someone.
func TestStackSideFailures(t *testing.T) {
	t.Parallel()
	body := payload("queued", 1, "octo/app", []string{"hangar", "linux-x64"}, "")
	for _, tc := range []struct {
		name   string
		deps   func(*webhook.Deps)
		reason string
	}{
		{"secret unreadable", func(d *webhook.Deps) {
			d.Secret = func(context.Context, bool) ([][]byte, error) { return nil, errors.New("AccessDenied") }
		}, webhook.ReasonSecret},
		{"secret empty", func(d *webhook.Deps) {
			d.Secret = func(context.Context, bool) ([][]byte, error) { return [][]byte{nil}, nil }
		}, webhook.ReasonSecret},
		{"pools unreadable", func(d *webhook.Deps) { d.Pools = brokenPools{} }, webhook.ReasonPools},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, q, buf := &noDB{}, &fake.SQS{}, &testbed.Buffer{}
			d := webhook.Deps{Secret: func(context.Context, bool) ([][]byte, error) { return [][]byte{[]byte(secret)}, nil },
				Queue: q, Pools: pools{table: "t"}, DynamoDB: db, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Metrics: &metrics.Writer{Out: buf}}
			tc.deps(&d)
			h, err := webhook.New(webhook.Config{Stack: "hangar", JobsQueueURL: jobsQueue}, d)
			require.NoError(t, err)
			resp := h.Handle(context.Background(), request(body, nil))
			require.Equal(t, http.StatusServiceUnavailable, resp.Status, resp.Body)
			require.Zero(t, db.calls.Load(), "nothing recorded")
			require.Empty(t, q.Bodies(jobsQueue), "nothing queued")
			require.Contains(t, buf.String(), `"WebhookErrors":1`)
			require.Contains(t, buf.String(), fmt.Sprintf(`"Reason":"%s"`, tc.reason))
		})
	}
}

// TestRouting: the stack's jobs are recorded once and queued for their pool; others are left
// alone, the ones that name no pool or two with a log line and a metric, and nothing queued.
func TestRouting(t *testing.T) {
	t.Parallel()
	testbed.Require(t)
	db := testbed.DynamoDB(t)
	table := testbed.Name(t, "hangar-webhook")
	ctx := testbed.Context(t, time.Minute)
	require.NoError(t, testbed.CreateTable(ctx, db, table))
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	w := newWorld(t, db, table)
	seq := time.Now().UnixNano() % 1e9
	next := func() int64 { seq++; return seq }

	type want struct {
		status int
		pool   string // queued for this pool ("" for none)
		reason string // the unrouted reason in the log and metrics
	}
	tests := []struct {
		name   string
		action string
		repo   string
		labels []string
		runner string
		want   want
	}{
		{"exact", "queued", "octo/app", []string{"self-hosted", "hangar", "linux-x64"}, "", want{202, "small", ""}},
		{"most specific", "queued", "other/app", []string{"hangar", "large"}, "", want{202, "large", ""}},
		{"not ours", "queued", "octo/app", []string{"self-hosted", "linux-x64"}, "", want{202, "", ""}},
		{"ambiguous", "queued", "octo/app", []string{"hangar", "gpu"}, "", want{202, "", jobs.ReasonAmbiguous}},
		{"unknown", "queued", "octo/app", []string{"hangar", "windows"}, "", want{202, "", jobs.ReasonUnknown}},
		{"repository not allowed", "queued", "other/app", []string{"hangar", "linux-x64"}, "", want{403, "", jobs.ReasonRepository}},
		{"in progress on our runner", "in_progress", "octo/app", []string{"self-hosted"}, "hangar-hangar-i-0123456789abcdef0-j5", want{202, "-", ""}},
		{"in progress on our runner, outside repository", "in_progress", "evil/app", []string{"self-hosted"}, "hangar-hangar-i-0123456789abcdef1-j6", want{202, "-", ""}},
		{"in progress elsewhere", "in_progress", "octo/app", []string{"self-hosted"}, "someone-elses", want{202, "", ""}},
		{"completed, ours", "completed", "octo/app", []string{"hangar", "linux-x64"}, "", want{202, "small", ""}},
	}
	for _, tc := range tests {
		job := next()
		before := len(w.queued(t))
		resp := w.h.Handle(ctx, request(payload(tc.action, job, tc.repo, tc.labels, tc.runner), nil))
		require.Equal(t, tc.want.status, resp.Status, "%s: %s", tc.name, resp.Body)
		msgs := w.queued(t)
		if tc.want.pool == "" {
			require.Len(t, msgs, before, "%s: nothing queued", tc.name)
		} else {
			require.Len(t, msgs, before+1, "%s: queued", tc.name)
			m := msgs[len(msgs)-1]
			require.Equal(t, job, m.Job.ID, tc.name)
			require.Equal(t, jobs.Kind(tc.action), m.Kind, tc.name)
			require.Equal(t, int64(11), m.Job.Installation, tc.name)
			if tc.want.pool != "-" {
				require.Equal(t, tc.want.pool, m.Job.Pool, tc.name)
			}
			// A second delivery of the same job and action, by another delivery id, is a no-op.
			resp := w.h.Handle(ctx, request(payload(tc.action, job, tc.repo, tc.labels, tc.runner), func(h http.Header) {
				h.Set(webhook.HeaderDelivery, "d-2")
			}))
			require.Equal(t, 200, resp.Status, "%s: duplicate: %s", tc.name, resp.Body)
			require.Contains(t, resp.Body, "duplicate")
			if tc.action == "queued" {
				require.Len(t, w.queued(t), before+1, "%s: the duplicate queues nothing", tc.name)
			} else {
				// Passed on with its record, for speed: the dispatcher's conditional writes make
				// a second in_progress or completed change nothing (dispatch's tests).
				require.LessOrEqual(t, len(w.queued(t)), before+2, tc.name)
			}
		}
		if tc.want.reason != "" {
			require.Contains(t, w.log.String(), fmt.Sprintf("job=%d", job), tc.name)
			require.Contains(t, w.metrics.String(), fmt.Sprintf(`"Reason":"%s"`, tc.want.reason), tc.name)
		}
	}
	require.Contains(t, w.metrics.String(), `"JobsUnrouted":1`)

	// A job the queue refused is forgotten: GitHub shows the delivery failed, and a redelivery is
	// taken rather than taken for a duplicate.
	w.q.Inject("SendMessage", errors.New("queue down"))
	job := next()
	body := payload("queued", job, "octo/app", []string{"hangar", "linux-x64"}, "")
	resp := w.h.Handle(ctx, request(body, nil))
	require.Equal(t, http.StatusBadGateway, resp.Status, resp.Body)
	require.Contains(t, w.metrics.String(), `"Reason":"queue"`, "counted for the webhook errors alarm")
	resp = w.h.Handle(ctx, request(body, nil))
	require.Equal(t, http.StatusAccepted, resp.Status, resp.Body)
}

// TestSecretRotation: while a rotation is under way the stack holds the new secret and the one
// before it: a delivery signed with either is taken (the App's setting may change before or
// after the stack's secret); once the previous one is gone, a delivery signed with it is refused.
func TestSecretRotation(t *testing.T) {
	t.Parallel()
	body := payload("queued", 1, "octo/app", []string{"hangar", "linux-x64"}, "")
	for _, tc := range []struct {
		name    string
		secrets [][]byte
		taken   bool
	}{
		{"signed with the previous secret, during the rotation", [][]byte{[]byte("the-new-secret"), []byte(secret)}, true},
		{"signed with the new secret", [][]byte{[]byte(secret), []byte("the-old-secret")}, true},
		{"signed with a secret no longer kept", [][]byte{[]byte("the-new-secret")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, q := &noDB{}, &fake.SQS{}
			h, err := webhook.New(webhook.Config{Stack: "hangar", JobsQueueURL: jobsQueue}, webhook.Deps{
				Secret: func(context.Context, bool) ([][]byte, error) { return tc.secrets, nil },
				Queue:  q, Pools: pools{table: "t"}, DynamoDB: db, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Metrics: &metrics.Writer{Out: &testbed.Buffer{}}})
			require.NoError(t, err)
			resp := h.Handle(context.Background(), request(body, nil))
			if !tc.taken {
				require.Equal(t, http.StatusUnauthorized, resp.Status, resp.Body)
				require.Zero(t, db.calls.Load(), "refused before anything is recorded")
				return
			}
			require.NotEqual(t, http.StatusUnauthorized, resp.Status, resp.Body)
			require.Positive(t, db.calls.Load(), "verified: the delivery went on to be recorded")
		})
	}
}
