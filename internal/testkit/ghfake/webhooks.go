package ghfake

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Delivery is one webhook delivery the server made, or dropped (DropDeliveries).
type Delivery struct {
	ID string // X-GitHub-Delivery; a redelivery keeps the delivery's id
	// Num is the attempt's id in the App's list of deliveries (GET /app/hook/deliveries); 0 for a
	// dropped one, which GitHub never attempted.
	Num        int64
	Redelivery bool   // an attempt asked for again (Redeliver, or POST …/attempts)
	Action     string // queued, in_progress, completed, or what SendJobEvent was given
	JobID      int64
	Body       []byte
	Headers    http.Header // the request's headers (none when dropped)
	Status     int         // the receiver's response status; 0 when it was not sent or got no answer
	Err        error       // the transport error, if any
	Dropped    bool        // DropDeliveries kept it from being sent
	At         time.Time   // when it was sent or dropped (wall clock)
}

// hookID is the webhook's id (X-GitHub-Hook-ID): the App's one webhook.
const hookID = 424242

// deliveryTimeout bounds each POST to the receiver, as GitHub's own timeout does.
const deliveryTimeout = 10 * time.Second

// hook is where the App's deliveries go.
type hook struct {
	url, secret string
}

// outgoing is a delivery waiting to be sent (or recorded as dropped).
type outgoing struct {
	id, action string
	jobID      int64
	body       []byte
	dropped    bool
	redelivery bool
}

// deliveryClient posts deliveries; like GitHub, it follows no redirect.
var deliveryClient = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// SetWebhook makes every later job state change send the App's workflow_job delivery to url,
// signed with secret (X-Hub-Signature-256): queued when a job is queued, in_progress when a
// runner takes it, completed when it ends. Deliveries are sent in order, one at a time, never
// holding up the server. An empty url stops them.
func (s *Server) SetWebhook(url, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if url == "" {
		s.hook = nil
		return
	}
	s.hook = &hook{url: url, secret: secret}
}

// RouteHook makes deliveries to webhook URL url reach local instead, as the internet would route
// a Function URL's address to the function: the App keeps url as its webhook.
func (s *Server) RouteHook(url, local string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hookRoutes[url] = local
}

// Deliveries returns a copy of every delivery made so far, in the order made.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Delivery, len(s.deliveries))
	for i, d := range s.deliveries {
		d.Body, d.Headers = bytes.Clone(d.Body), d.Headers.Clone()
		out[i] = d
	}
	return out
}

// WaitDeliveries waits until at least n deliveries have been made (or dropped), or ctx ends.
func (s *Server) WaitDeliveries(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		got, news := len(s.deliveries), s.deliveryNews
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d deliveries made: %w", got, n, ctx.Err())
		case <-news:
		}
	}
}

// PauseDeliveries holds the automatic deliveries back: they queue up until ResumeDeliveries,
// which sends them in order.
func (s *Server) PauseDeliveries() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = true
}

// ResumeDeliveries sends the deliveries held back since PauseDeliveries, in order, and the
// later ones as they come.
func (s *Server) ResumeDeliveries() {
	s.mu.Lock()
	s.paused = false
	s.mu.Unlock()
	s.wakeDeliveries()
}

// DropDeliveries makes the automatic deliveries of action be recorded as dropped (Status 0,
// Dropped) and not sent, or sent again when drop is false: a delivery GitHub never makes.
// Redeliver still sends a dropped delivery.
func (s *Server) DropDeliveries(action string, drop bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropActions[action] = drop
}

// DropEvery makes every nth automatic delivery (of any action) be dropped as DropDeliveries drops
// them, counting from the next one; 0 stops it.
func (s *Server) DropEvery(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropEvery, s.emitted = n, 0
}

// Redeliver sends delivery id again, with the same body and X-GitHub-Delivery, as "Redeliver"
// in GitHub's UI does, and records it as a new delivery. It returns an error when there is no
// such delivery or webhook, or the receiver could not be reached or answered other than 2xx.
func (s *Server) Redeliver(id string) error {
	s.mu.Lock()
	var o *outgoing
	for _, d := range s.deliveries {
		if d.ID == id {
			o = &outgoing{id: d.ID, action: d.Action, jobID: d.JobID, body: d.Body, redelivery: true}
		}
	}
	h := s.hook
	s.mu.Unlock()
	switch {
	case o == nil:
		return fmt.Errorf("redeliver %s: no such delivery", id)
	case h == nil:
		return fmt.Errorf("redeliver %s: no webhook (SetWebhook)", id)
	}
	d := s.send(*h, *o)
	s.record(d)
	return d.err()
}

// SendJobEvent sends a fresh delivery (a new id) of job jobID's payload with action, at once, and
// records it: for tests of late, repeated and out-of-order deliveries. The payload shows the job
// as the action has it (no runner in a queued one). It returns the delivery's id, and an error as
// Redeliver does.
func (s *Server) SendJobEvent(jobID int64, action string) (string, error) {
	s.mu.Lock()
	j, ok := s.jobs[jobID]
	h := s.hook
	var body []byte
	if ok && h != nil {
		body = s.payload(j, action)
	}
	s.mu.Unlock()
	switch {
	case !ok:
		return "", fmt.Errorf("send a %s event of job %d: no such job", action, jobID)
	case h == nil:
		return "", fmt.Errorf("send a %s event of job %d: no webhook (SetWebhook)", action, jobID)
	}
	d := s.send(*h, outgoing{id: newUUID(), action: action, jobID: jobID, body: body})
	s.record(d)
	return d.ID, d.err()
}

// err is the delivery's failure, or nil when the receiver took it (2xx).
func (d Delivery) err() error {
	switch {
	case d.Err != nil:
		return fmt.Errorf("delivery %s (%s of job %d): %w", d.ID, d.Action, d.JobID, d.Err)
	case d.Status < 200 || d.Status > 299:
		return fmt.Errorf("delivery %s (%s of job %d): the receiver answered %d", d.ID, d.Action, d.JobID, d.Status)
	}
	return nil
}

// emit queues the delivery of job j's action, when there is a webhook. The caller holds s.mu.
func (s *Server) emit(j *Job, action string) {
	if s.hook == nil {
		return
	}
	s.emitted++
	drop := s.dropActions[action] || s.dropEvery > 0 && s.emitted%s.dropEvery == 0
	s.outbox = append(s.outbox, outgoing{id: newUUID(), action: action, jobID: j.ID, body: s.payload(j, action), dropped: drop})
	s.wakeDeliveries()
}

func (s *Server) wakeDeliveries() {
	select {
	case s.deliveryWake <- struct{}{}:
	default: // already woken
	}
}

// deliverLoop sends the queued deliveries in order, until Close.
func (s *Server) deliverLoop() {
	defer s.bg.Done()
	for {
		s.mu.Lock()
		var next outgoing
		ready := !s.paused && len(s.outbox) > 0
		if ready {
			next, s.outbox = s.outbox[0], s.outbox[1:]
		}
		h := s.hook
		s.mu.Unlock()
		if !ready {
			select {
			case <-s.life.Done():
				return
			case <-s.deliveryWake:
			}
			continue
		}
		if next.dropped || h == nil {
			s.record(Delivery{ID: next.id, Action: next.action, JobID: next.jobID, Body: next.body, Dropped: true, At: time.Now()})
			continue
		}
		d := s.send(*h, next)
		if s.life.Err() != nil {
			return // closed mid-delivery: nothing is recorded after Close
		}
		s.record(d)
	}
}

// send posts one delivery to the webhook and returns its record.
func (s *Server) send(h hook, o outgoing) Delivery {
	d := Delivery{ID: o.id, Action: o.action, JobID: o.jobID, Body: o.body, At: time.Now(), Redelivery: o.redelivery}
	ctx, cancel := context.WithTimeout(s.life, deliveryTimeout)
	defer cancel()
	s.mu.Lock()
	target := cmp.Or(s.hookRoutes[h.url], h.url)
	s.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(o.body))
	if err != nil {
		d.Err = err
		return d
	}
	mac := hmac.New(sha256.New, []byte(h.secret))
	mac.Write(o.body)
	s.mu.Lock()
	appID := int64(0)
	if s.app != nil {
		appID = s.app.id
	}
	s.mu.Unlock()
	for k, v := range map[string]string{
		"Content-Type":                           "application/json",
		"User-Agent":                             "GitHub-Hookshot/ghfake",
		"X-GitHub-Event":                         "workflow_job",
		"X-GitHub-Delivery":                      o.id,
		"X-GitHub-Hook-ID":                       strconv.Itoa(hookID),
		"X-GitHub-Hook-Installation-Target-Type": "integration",
		"X-GitHub-Hook-Installation-Target-ID":   strconv.FormatInt(appID, 10),
		"X-Hub-Signature-256":                    "sha256=" + hex.EncodeToString(mac.Sum(nil)),
	} {
		req.Header.Set(k, v)
	}
	d.Headers = req.Header.Clone()
	resp, err := deliveryClient.Do(req)
	if err != nil {
		d.Err = err
		return d
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	d.Status = resp.StatusCode
	return d
}

// record appends d to the deliveries and wakes WaitDeliveries.
func (s *Server) record(d Delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !d.Dropped {
		s.attempts++
		d.Num = s.attempts
	}
	s.deliveries = append(s.deliveries, d)
	close(s.deliveryNews)
	s.deliveryNews = make(chan struct{})
}

// payload is the workflow_job delivery of job j's action, in GitHub's shape (what go-github's
// WorkflowJobEvent decodes, and GitHub's webhooks description says), showing the job as that
// action has it. The caller holds s.mu.
func (s *Server) payload(j *Job, action string) []byte {
	status := action
	if action != "queued" && action != "in_progress" && action != "completed" && action != "waiting" {
		status = j.Status
	}
	owner := j.Repo.Org()
	body := map[string]any{
		"action":       action,
		"workflow_job": s.job(j, status),
		"repository":   s.repository(string(j.Repo)),
		"sender":       user(s.URL(), "octocat", 1, "User"),
	}
	if s.isOrg(owner) {
		body["organization"] = s.organisation(owner)
	}
	if in := s.installationFor(j.Repo); in != nil {
		body["installation"] = map[string]any{"id": in.id, "node_id": fmt.Sprintf("MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9u%d", in.id)}
	}
	b, err := json.Marshal(body)
	if err != nil {
		panic(fmt.Sprintf("ghfake: encode a workflow_job payload: %v", err)) // maps of plain values always encode
	}
	return b
}

// stamp formats t as GitHub's payloads do.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// RepoID returns the id the stand-in gives repository repo (owner/name), the same on every call:
// the repository.id of its payloads, and what runner groups' selected_repository_ids name.
func (s *Server) RepoID(repo string) int64 {
	id := stableID(strings.ToLower(repo))
	s.repoNames.LoadOrStore(id, repo)
	return id
}

// repoName returns the repository of id, or "" when the stand-in never named one so.
func (s *Server) repoName(id int64) string {
	name, _ := s.repoNames.Load(id)
	repo, _ := name.(string)
	return repo
}

// stableID derives a positive id from a name, the same on every call.
func stableID(name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return int64(h.Sum64()%1_000_000_000) + 1
}

// headSHA is the commit a run "ran on": 40 hex digits derived from the repository and run.
func headSHA(repo, run string) string {
	sum := sha256.Sum256([]byte(repo + "@" + run))
	return hex.EncodeToString(sum[:20])
}

// newUUID returns a random (version 4) UUID, as X-GitHub-Delivery carries.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
