package jobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// Version is the version of the messages this code writes and reads.
const Version = 1

// Kind is what a jobs-queue message asks of the dispatcher.
type Kind string

// The kinds of jobs-queue messages. The webhook function sends the first three, one per
// workflow_job delivery it accepts; the dispatcher sends itself the others, delayed.
const (
	// KindQueued: a job of the stack's was queued; place it on an instance of its pool.
	KindQueued Kind = "queued"
	// KindInProgress: a runner took a job; its instance goes running.
	KindInProgress Kind = "in_progress"
	// KindCompleted: a job ended (or was cancelled before it started); its instance goes back.
	KindCompleted Kind = "completed"
	// KindCheck: the bound of a job's runner has passed; a runner still waiting is removed and
	// its instance given back.
	KindCheck Kind = "check"
	// KindUnregister: delete a runner GitHub would not delete earlier (it was busy).
	KindUnregister Kind = "unregister"
	// KindSweep: look for work GitHub did not deliver (failed deliveries, queued jobs with no
	// record) and recover it. The stack's schedule sends it (SweepMessage).
	KindSweep Kind = "sweep"
)

// SweepMessage is the message the stack's schedule sends for a sweep.
const SweepMessage = `{"v":1,"kind":"sweep"}`

// Job is a workflow job as the stack knows it.
type Job struct {
	ID         int64  `json:"id"`
	RunID      int64  `json:"runId"`
	RunAttempt int    `json:"runAttempt,omitempty"`
	Repo       string `json:"repo"` // owner/name
	// RepoID is the repository's id: an organisation-scoped pool's runners are made in a runner
	// group open to that repository alone.
	RepoID int64    `json:"repoId,omitempty"`
	Labels []string `json:"labels"`
	// Pool is the pool the job was routed to (queued), or the pool of its runner.
	Pool string `json:"pool,omitempty"`
	// Installation is the GitHub App installation that sent the job: the dispatcher's
	// credentials for the job's repository.
	Installation int64 `json:"installation"`
	// RunnerName and RunnerID name the runner that took the job (in_progress, completed).
	RunnerName string `json:"runnerName,omitempty"`
	RunnerID   int64  `json:"runnerId,omitempty"`
	Conclusion string `json:"conclusion,omitempty"`
	// Delivery is the webhook delivery the message came from, for the logs.
	Delivery string `json:"delivery,omitempty"`
	// Redispatch counts the times the job was placed again after another job took its runner
	// (its key is then j<id>r<n>: names.JobKey).
	Redispatch int `json:"redispatch,omitempty"`
	// Name, Workflow and URL are what GitHub shows of the job: its name, its workflow's, and its
	// page (for the operator's views).
	Name     string `json:"name,omitempty"`
	Workflow string `json:"workflow,omitempty"`
	URL      string `json:"url,omitempty"`
}

// Info is what the operator's views show of the job, nil when GitHub named nothing.
func (j Job) Info() *state.JobInfo {
	if j.Name == "" && j.Workflow == "" && j.URL == "" {
		return nil
	}
	return &state.JobInfo{Name: j.Name, Workflow: j.Workflow, URL: j.URL}
}

// Key is the key an instance serves the job under (names.JobKey).
func (j Job) Key() string { return names.JobKey(j.ID, j.Redispatch) }

// Message is one jobs-queue message.
type Message struct {
	V    int  `json:"v"`
	Kind Kind `json:"kind"`
	Job  Job  `json:"job"`
	// InstanceID, Key and Version name the assignment a check or an unregister is about: the
	// instance, the job key it was given and the item version that gave it.
	InstanceID string `json:"instanceId,omitempty"`
	Key        string `json:"key,omitempty"`
	Version    int64  `json:"version,omitempty"`
	// Scope is where an unregister's runner is registered (owner/name or owner).
	Scope string `json:"scope,omitempty"`
	// Round counts a check's or an unregister's repetitions (each is bounded), or the tries of a
	// queued job waiting for room under a cap.
	Round int `json:"round,omitempty"`
	// WaitingSince is when a queued job began to wait for room (zero: it has not waited).
	WaitingSince time.Time `json:"waitingSince,omitzero"`
	// Spare marks a queued job placed again because another job took its runner: it is placed
	// even if the job has started meanwhile, for whichever job of its pool and repository is
	// still queued has lost that runner.
	Spare bool `json:"spare,omitempty"`
}

// MaxMessage bounds a message's size (SQS takes 256 KiB; a job is far smaller).
const MaxMessage = 64 << 10

// Encode returns the message as JSON, after validating it.
func (m Message) Encode() (string, error) {
	m.V = Version
	if err := m.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode %s message: %w", m.Kind, err)
	}
	return string(b), nil
}

// Parse reads a jobs-queue message; a message that is not one (not JSON, another version, a
// field missing or malformed) is an error naming what is wrong.
func Parse(body string) (Message, error) {
	if len(body) > MaxMessage {
		return Message{}, fmt.Errorf("jobs message of %d bytes: want at most %d", len(body), MaxMessage)
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	var m Message
	if err := dec.Decode(&m); err != nil {
		return Message{}, fmt.Errorf("jobs message is not JSON of the expected shape: %w", err)
	}
	if m.V != Version {
		return Message{}, fmt.Errorf("jobs message version %d: this dispatcher reads version %d", m.V, Version)
	}
	return m, m.Validate()
}

// Validate checks the fields the message's kind needs.
func (m Message) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s message: "+format, append([]any{m.Kind}, a...)...))
	}
	switch m.Kind {
	case KindQueued, KindInProgress, KindCompleted, KindCheck:
		if m.Job.ID < 1 {
			bad("job id %d: want a workflow job's id", m.Job.ID)
		}
		if err := names.ValidateRepository(m.Job.Repo); err != nil {
			bad("repository: %v", err)
		}
		if m.Job.Installation < 1 {
			bad("installation %d: want the GitHub App installation that sent the job", m.Job.Installation)
		}
		if m.Job.Redispatch < 0 || m.Job.Redispatch > MaxRedispatch {
			bad("redispatch %d: want 0 to %d", m.Job.Redispatch, MaxRedispatch)
		}
	case KindUnregister:
		if m.Job.Installation < 1 || m.Scope == "" || m.Job.RunnerID < 1 {
			bad("want the installation, the scope and the runner id")
		}
	case KindSweep:
	default:
		bad("unknown kind: want queued, in_progress, completed, check, unregister or sweep")
	}
	if m.Kind == KindQueued {
		if err := names.ValidatePool(m.Job.Pool); err != nil {
			bad("%v", err)
		}
	}
	if m.Kind == KindCheck {
		if err := names.ValidateInstanceID(m.InstanceID); err != nil {
			bad("%v", err)
		}
		if !names.IsJobKey(m.Key) || m.Version < 1 {
			bad("key %q version %d: want the job key and the item version of the assignment", m.Key, m.Version)
		}
	}
	return errors.Join(errs...)
}

// MaxRedispatch bounds how often one job is placed again after other jobs took its runners, or
// its runners ended without taking it.
const MaxRedispatch = 9

// Return is what an agent puts on the returns queue when it has finished a label-routed job:
// instance InstanceID, serving Key at item Version, has ended the job on the instance and
// signalled it (DEREGISTERED, or FAILED). It is a hint: the dispatcher reads the item and acts
// only on what the item says.
type Return struct {
	V          int    `json:"v"`
	InstanceID string `json:"instanceId"`
	Key        string `json:"key"`
	Version    int64  `json:"version"`
	// Lost says the runner did not end by itself after a job: the agent restarted while it ran
	// (and could not take it back), so GitHub may still list it.
	Lost bool `json:"lost,omitempty"`
}

// Encode returns the return as JSON.
func (r Return) Encode() (string, error) {
	r.V = Version
	if err := r.validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(r)
	return string(b), err
}

// ParseReturn reads a returns-queue message.
func ParseReturn(body string) (Return, error) {
	if len(body) > 1024 {
		return Return{}, fmt.Errorf("return message of %d bytes: want at most 1024", len(body))
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	var r Return
	if err := dec.Decode(&r); err != nil {
		return Return{}, fmt.Errorf("return message is not JSON of the expected shape: %w", err)
	}
	if r.V != Version {
		return Return{}, fmt.Errorf("return message version %d: this dispatcher reads version %d", r.V, Version)
	}
	return r, r.validate()
}

func (r Return) validate() error {
	if err := names.ValidateInstanceID(r.InstanceID); err != nil {
		return fmt.Errorf("return message: %w", err)
	}
	if !names.IsJobKey(r.Key) || r.Version < 1 {
		return fmt.Errorf("return message: key %q version %d: want a job key and the item version", r.Key, r.Version)
	}
	return nil
}
