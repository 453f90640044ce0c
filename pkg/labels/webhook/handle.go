package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/go-github/v66/github"

	"github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/platform/ghurl"
)

// Headers GitHub sends with every delivery.
const (
	HeaderSignature = "X-Hub-Signature-256"
	HeaderEvent     = "X-GitHub-Event"
	HeaderDelivery  = "X-GitHub-Delivery"
)

// secretRereadEvery bounds how often a mismatched signature makes the handler read the secret
// again: whoever can reach the URL must not be able to make it hammer Secrets Manager.
const secretRereadEvery = 10 * time.Second

// outcome is what became of one delivery, for its log line and the response.
type outcome struct {
	status int
	msg    string
	level  slog.Level
	reason string // a refusal's or an unrouted job's reason, for the metrics
	job    *jobs.Job
	action string
}

// Why a delivery is refused, as the WebhooksRefused metric's Reason dimension names it; the
// trust set's refusals are jobs.ReasonRepository and jobs.ReasonInstallation.
const (
	ReasonMethod    = "method"    // not a POST
	ReasonSize      = "size"      // a body over MaxBody
	ReasonSignature = "signature" // unsigned, or not signed with the webhook secret
	ReasonMalformed = "malformed" // not a workflow_job payload
	ReasonAction    = "action"    // an action GitHub does not send
)

// Why a delivery failed on the stack's side (5xx: GitHub does not deliver it again by itself), as
// the WebhookErrors metric's Reason dimension names it.
const (
	ReasonPools  = "pools"  // the stack's pool documents could not be read
	ReasonSecret = "secret" // the webhook secret could not be read, or is empty
	ReasonRecord = "record" // the event could not be recorded in the table
	ReasonQueue  = "queue"  // the jobs queue refused the job
)

// ErrorReasons are every Reason of WebhookErrors: the stack's alarm sums them.
var ErrorReasons = []string{ReasonPools, ReasonSecret, ReasonRecord, ReasonQueue}

// RefusalReasons are every Reason of WebhooksRefused: the stack's alarm sums them.
var RefusalReasons = []string{ReasonMethod, ReasonSize, ReasonSignature, ReasonMalformed, ReasonAction,
	jobs.ReasonRepository, jobs.ReasonInstallation}

// Handle answers one delivery. It reads nothing of the body before the signature is checked.
func (h *Handler) Handle(ctx context.Context, req Request) Response {
	start := h.d.Now()
	o := h.handle(ctx, req)
	attrs := []any{"status", o.status, "delivery", req.Headers.Get(HeaderDelivery), "event", req.Headers.Get(HeaderEvent),
		"ms", h.d.Now().Sub(start).Milliseconds()}
	if o.action != "" {
		attrs = append(attrs, "action", o.action)
	}
	if j := o.job; j != nil {
		attrs = append(attrs, "job", j.ID, "run", j.RunID, "repository", j.Repo, "labels", j.Labels)
		if j.Pool != "" {
			attrs = append(attrs, "pool", j.Pool)
		}
		if j.RunnerName != "" {
			attrs = append(attrs, "runner", j.RunnerName)
		}
	}
	if o.reason != "" {
		attrs = append(attrs, "reason", o.reason)
	}
	h.d.Log.Log(ctx, o.level, o.msg, attrs...)
	switch {
	case o.status == http.StatusUnauthorized || o.status == http.StatusRequestEntityTooLarge || o.status == http.StatusBadRequest ||
		o.status == http.StatusMethodNotAllowed || o.status == http.StatusForbidden:
		h.d.Metrics.Emit(map[string]string{"Stack": h.cfg.Stack, "Reason": o.reason}, map[string]int{"WebhooksRefused": 1})
	case o.status >= http.StatusInternalServerError:
		h.d.Metrics.Emit(map[string]string{"Stack": h.cfg.Stack, "Reason": o.reason}, map[string]int{"WebhookErrors": 1})
	case o.reason != "" && o.job != nil:
		h.d.Metrics.Emit(map[string]string{"Stack": h.cfg.Stack, "Reason": o.reason}, map[string]int{"JobsUnrouted": 1})
	}
	return Response{Status: o.status, Body: o.msg + "\n"}
}

func refuse(status int, reason, format string, a ...any) outcome {
	return outcome{status: status, msg: fmt.Sprintf(format, a...), level: slog.LevelWarn, reason: reason}
}

func (h *Handler) handle(ctx context.Context, req Request) outcome {
	if req.Method != http.MethodPost {
		return refuse(http.StatusMethodNotAllowed, ReasonMethod, "method %s: want POST (GitHub's webhook deliveries)", req.Method)
	}
	if len(req.Body) > h.cfg.MaxBody {
		return refuse(http.StatusRequestEntityTooLarge, ReasonSize, "body of %d bytes: want at most %d (a workflow_job delivery is a few KiB)", len(req.Body), h.cfg.MaxBody)
	}
	if o, ok := h.verify(ctx, req); !ok {
		return o
	}
	event := req.Headers.Get(HeaderEvent)
	switch event {
	case "ping":
		return outcome{status: http.StatusOK, msg: "pong", level: slog.LevelInfo}
	case "workflow_job":
	default:
		return outcome{status: http.StatusAccepted, msg: fmt.Sprintf("event %q ignored: the App needs the workflow_job event only", event), level: slog.LevelInfo}
	}
	var ev github.WorkflowJobEvent
	if err := json.Unmarshal(req.Body, &ev); err != nil {
		return refuse(http.StatusBadRequest, ReasonMalformed, "body is not a workflow_job payload (JSON): %v", err)
	}
	action := ev.GetAction()
	var kind jobs.Kind
	switch action {
	case "queued":
		kind = jobs.KindQueued
	case "in_progress":
		kind = jobs.KindInProgress
	case "completed":
		kind = jobs.KindCompleted
	case "waiting":
		return outcome{status: http.StatusAccepted, msg: "waiting ignored: the job is not queued yet", level: slog.LevelInfo, action: action}
	default:
		o := refuse(http.StatusBadRequest, ReasonAction, "action %q: want queued, in_progress, completed or waiting", action)
		o.action = action
		return o
	}
	job, err := jobOf(&ev, req.Headers.Get(HeaderDelivery))
	if err != nil {
		o := refuse(http.StatusBadRequest, ReasonMalformed, "workflow_job payload: %v", err)
		o.action = action
		return o
	}
	o := outcome{action: action, job: &job, level: slog.LevelInfo}
	router, store, err := h.stack(ctx)
	if err != nil {
		o.status, o.msg, o.level = http.StatusServiceUnavailable, "the stack's pools cannot be read; GitHub will show this delivery failed: redeliver it", slog.LevelError
		o.reason = ReasonPools
		h.d.Log.Error("pools", "error", err)
		return o
	}
	ours := router.Ours(job.Labels)
	if job.Installation < 1 {
		// Not the App's delivery (a repository's or organisation's webhook with the same
		// secret): another system's job is left alone, one that names the stack is refused.
		if !ours && !strings.HasPrefix(job.RunnerName, h.prefix) {
			o.status, o.msg, o.level = http.StatusAccepted, "not the stack's job or runner: ignored", slog.LevelDebug
			return o
		}
		return untrusted(o, errNoInstallation)
	}
	if kind == jobs.KindQueued {
		pool, err := router.Admit(job.Repo, job.Installation, job.Labels)
		var re *jobs.RouteError
		switch {
		case errors.Is(err, pooldoc.ErrInstallation) || errors.Is(err, pooldoc.ErrRepository):
			// Judged before routing: a job from outside the trust set is refused whatever its
			// labels, and never counted as unrouted (an alarm the outside must not set off).
			return untrusted(o, err)
		case errors.As(err, &re):
			o.status, o.msg, o.level, o.reason = http.StatusAccepted, "job left alone: "+re.Error(), slog.LevelWarn, re.Reason
			return o
		case err != nil:
			o.status, o.msg, o.level = http.StatusAccepted, "not the stack's job (no stack label): left for other runners", slog.LevelDebug
			return o
		}
		job.Pool = pool.Name
		if !ghurl.SameServer(job.URL, pool.GitHubURL) {
			job.URL = "" // a link to the pool's own GitHub server only
		}
	} else {
		// A job of the stack's, or any job a runner of the stack's took. One its runner took is
		// passed on whoever took it: the dispatcher must learn that the job the runner was made
		// for lost it, and place that job again.
		ourRunner := strings.HasPrefix(job.RunnerName, h.prefix)
		if !ours && !ourRunner {
			o.status, o.msg, o.level = http.StatusAccepted, "not the stack's job or runner: ignored", slog.LevelDebug
			return o
		}
		if err := router.Trusted(job.Repo, job.Installation); err != nil && !ourRunner {
			return untrusted(o, err)
		}
		if pool, err := router.Route(job.Labels); err == nil {
			job.Pool = pool.Name
		}
	}
	body, err := jobs.Message{Kind: kind, Job: job}.Encode()
	if err != nil {
		return refuse(http.StatusBadRequest, ReasonMalformed, "workflow_job payload: %v", err)
	}
	send := func() error {
		_, err := h.d.Queue.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(h.cfg.JobsQueueURL), MessageBody: &body})
		return err
	}
	var (
		first        bool
		recErr, sErr error
	)
	if kind == jobs.KindQueued {
		// Recorded first, then queued: a second delivery must never place a job twice.
		if first, recErr = store.RecordEvent(ctx, job.ID, action, body); recErr == nil && first {
			sErr = send()
		}
	} else {
		// The dispatcher takes a second in_progress or completed of a job for what it is (its
		// conditional writes find the instance moved on): the record and the send go together,
		// and a duplicate sent anyway costs it a read.
		var wg sync.WaitGroup
		wg.Go(func() { first, recErr = store.RecordEvent(ctx, job.ID, action, body) })
		sErr = send()
		wg.Wait()
	}
	switch {
	case recErr != nil:
		o.status, o.msg, o.level, o.reason = http.StatusServiceUnavailable, "the event could not be recorded; redeliver it", slog.LevelError, ReasonRecord
		h.d.Log.Error("record event", "job", job.ID, "action", action, "error", recErr)
		return o
	case !first && kind == jobs.KindQueued:
		o.status, o.msg = http.StatusOK, fmt.Sprintf("duplicate: the %s event of job %d was accepted before; nothing done", action, job.ID)
		return o
	case !first:
		o.status, o.msg = http.StatusOK, fmt.Sprintf("duplicate: the %s event of job %d was accepted before; the dispatcher finds nothing to do", action, job.ID)
		return o
	case sErr != nil:
		// Forget the event, so that a redelivery is taken rather than taken for a duplicate.
		if ferr := store.ForgetEvent(context.WithoutCancel(ctx), job.ID, action); ferr != nil {
			h.d.Log.Error("forget an event that was not queued; a redelivery will be taken for a duplicate", "job", job.ID, "error", ferr)
		}
		o.status, o.msg, o.level, o.reason = http.StatusBadGateway, "the jobs queue refused the job; redeliver it", slog.LevelError, ReasonQueue
		h.d.Log.Error("send to the jobs queue", "job", job.ID, "error", sErr)
		return o
	}
	o.status = http.StatusAccepted
	if kind == jobs.KindQueued {
		o.msg = fmt.Sprintf("job %d queued for pool %s", job.ID, job.Pool)
	} else {
		o.msg = fmt.Sprintf("job %d %s passed on", job.ID, action)
	}
	return o
}

// untrusted refuses, before anything is recorded, a delivery of the stack's from outside the trust
// set (err from pooldoc.Document.Admits): 403, which a redelivery answers the same.
func untrusted(o outcome, err error) outcome {
	o.status, o.msg, o.level, o.reason = http.StatusForbidden, "job refused: "+err.Error(), slog.LevelWarn, jobs.AdmitReason(err)
	return o
}

// verify checks the delivery's signature: HMAC-SHA-256 of the body with the webhook secret,
// compared in constant time (github.ValidateSignature). A mismatch reads the secret again (at
// most every secretRereadEvery) in case it was rotated.
func (h *Handler) verify(ctx context.Context, req Request) (outcome, bool) {
	sig := req.Headers.Get(HeaderSignature)
	if sig == "" {
		return refuse(http.StatusUnauthorized, ReasonSignature, "no %s header: deliveries must be signed with the webhook secret", HeaderSignature), false
	}
	if !strings.HasPrefix(sig, "sha256=") {
		return refuse(http.StatusUnauthorized, ReasonSignature, "%s %q: want sha256=<hex>", HeaderSignature, truncate(sig, 16)), false
	}
	secrets, err := h.d.Secret(ctx, false)
	if err == nil && (len(secrets) == 0 || len(secrets[0]) == 0) {
		err = errors.New("the secret is empty: put the App's webhook secret in it")
	}
	if err != nil {
		h.d.Log.Error("the webhook secret", "error", err)
		return outcome{status: http.StatusServiceUnavailable, msg: "the webhook secret is not set up: see docs/labels.md", level: slog.LevelError, reason: ReasonSecret}, false
	}
	if signedWithAny(sig, req.Body, secrets) {
		return outcome{}, true
	}
	h.mu.Lock()
	reread := h.d.Now().Sub(h.reread) >= secretRereadEvery
	if reread {
		h.reread = h.d.Now()
	}
	h.mu.Unlock()
	if reread {
		if fresh, err := h.d.Secret(ctx, true); err == nil && signedWithAny(sig, req.Body, fresh) {
			return outcome{}, true
		}
	}
	return refuse(http.StatusUnauthorized, ReasonSignature, "%s does not match the body: wrong webhook secret, or a forged or altered delivery", HeaderSignature), false
}

// signedWithAny reports whether sig is the body's signature with one of secrets (empty ones never
// match).
func signedWithAny(sig string, body []byte, secrets [][]byte) bool {
	for _, s := range secrets {
		if len(s) > 0 && github.ValidateSignature(sig, body, s) == nil {
			return true
		}
	}
	return false
}

// maxShownText bounds what a payload gives the operator's views to show (a job's name, its
// workflow's, its page): GitHub's own names are far shorter.
const maxShownText = 512

// errNoInstallation refuses a delivery that names no installation: the stack serves its App's.
var errNoInstallation = fmt.Errorf("%w: the delivery names no installation, so it is not the App's", pooldoc.ErrInstallation)

// jobOf reads the job out of a workflow_job payload; delivery is the delivery's id.
func jobOf(ev *github.WorkflowJobEvent, delivery string) (jobs.Job, error) {
	wj := ev.GetWorkflowJob()
	j := jobs.Job{ID: wj.GetID(), RunID: wj.GetRunID(), RunAttempt: int(wj.GetRunAttempt()), Labels: wj.Labels,
		Repo: ev.GetRepo().GetFullName(), RepoID: ev.GetRepo().GetID(), Installation: ev.GetInstallation().GetID(), RunnerName: wj.GetRunnerName(),
		RunnerID: wj.GetRunnerID(), Conclusion: wj.GetConclusion(), Delivery: truncate(delivery, 64),
		Name: shown(wj.GetName()), Workflow: shown(wj.GetWorkflowName())}
	if u := wj.GetHTMLURL(); len(u) <= maxShownText && (strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://")) {
		j.URL = u
	}
	var errs []error
	if j.ID < 1 {
		errs = append(errs, errors.New("workflow_job.id: missing"))
	}
	if err := names.ValidateRepository(j.Repo); err != nil {
		errs = append(errs, fmt.Errorf("repository.full_name: %w", err))
	}
	if j.RepoID < 1 {
		errs = append(errs, errors.New("repository.id: missing"))
	}
	if len(j.Labels) > 100 {
		errs = append(errs, fmt.Errorf("workflow_job.labels: %d: want at most 100", len(j.Labels)))
	}
	for _, l := range j.Labels {
		if len(l) > 256 {
			errs = append(errs, errors.New("workflow_job.labels: a label over 256 characters"))
			break
		}
	}
	if len(j.RunnerName) > 256 {
		errs = append(errs, errors.New("workflow_job.runner_name: over 256 characters"))
	}
	return j, errors.Join(errs...)
}

// shown is text of a payload kept for the operator's views: printable characters only (no
// control or invisible formatting ones, none SQS refuses), at most maxShownText bytes, cut on a
// character.
func shown(s string) string {
	var b strings.Builder
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError {
			continue
		}
		if b.Len()+utf8.RuneLen(r) > maxShownText {
			b.WriteString("…")
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// ServeHTTP serves the handler over HTTP: what a Function URL does in AWS, for the local world
// and the tests.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(h.cfg.MaxBody)+1))
	if err != nil {
		http.Error(w, "read the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp := h.Handle(r.Context(), Request{Method: r.Method, Headers: r.Header, Body: body})
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(resp.Status)
	_, _ = io.WriteString(w, resp.Body)
}
