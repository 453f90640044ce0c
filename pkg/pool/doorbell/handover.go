package doorbell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awserr"
)

// Kinds of secret a hand-over carries.
const (
	// KindRegistration is a runner registration token (a workflow run's assignment).
	KindRegistration = "registration"
	// KindJIT is a just-in-time runner configuration (a label-routed job's assignment).
	KindJIT = "jit"
)

// HandOver is the secret of one assignment, sent to the assigned instance's doorbell: the only
// queue that instance's role may receive from and no other role may. It rings as a plain ring
// does. The assignment itself (run, repository, runner URL, labels) is in the item; the agent
// uses a hand-over only for the assignment its item holds at Version, for Run.
type HandOver struct {
	Run     string `json:"run"`
	Version int64  `json:"version"`
	Kind    string `json:"kind"`
	Secret  string `json:"secret"`
	// ExpiresAt is when the secret stops working (a registration token's hour); zero: unknown.
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}

// Validate checks a hand-over's fields.
func (h HandOver) Validate() error {
	switch {
	case h.Run == "":
		return errors.New("hand-over: no run: want the assignment's run id or job key")
	case h.Version < 1:
		return fmt.Errorf("hand-over for %s: version %d: want the item version of the assignment (1 or more)", h.Run, h.Version)
	case h.Kind != KindRegistration && h.Kind != KindJIT:
		return fmt.Errorf("hand-over for %s: kind %q: want %s or %s", h.Run, h.Kind, KindRegistration, KindJIT)
	case h.Secret == "":
		return fmt.Errorf("hand-over for %s: no secret", h.Run)
	}
	return nil
}

// String never shows the secret: hand-overs may be logged.
func (h HandOver) String() string {
	return fmt.Sprintf("hand-over of a %s secret for %s at version %d", h.Kind, h.Run, h.Version)
}

// Delivery is one hand-over and the doorbell it goes to: that of the instance whose ARN is ARN.
type Delivery struct {
	URL string
	ARN string
	HandOver
}

// HandOver sends each delivery to its doorbell, in parallel, once it has checked that the
// doorbell is tagged with the delivery's instance (Expect may have read it already): a doorbell
// tagged for another instance, or not there, is not sent to, and that is an error for that
// instance. Its agent will ask (state.Agent.Ask) and fail the registration when nobody answers.
func (b *Bells) HandOver(ctx context.Context, ds ...Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	if !b.On() {
		return errors.New("hand over runner secrets: the stack has no doorbells")
	}
	byURL := make(map[string]Delivery, len(ds))
	urls := make([]string, 0, len(ds))
	var errs []error
	for _, d := range ds {
		if err := d.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if d.URL == "" || d.ARN == "" {
			errs = append(errs, fmt.Errorf("%s: the instance has no doorbell", d.HandOver))
			continue
		}
		byURL[d.URL] = d
		urls = append(urls, d.URL)
	}
	errs = append(errs, b.each(ctx, urls, func(ctx context.Context, url string) error {
		d := byURL[url]
		switch owner, err := b.ownerOf(ctx, url); {
		case awserr.IsNotFound(err):
			return fmt.Errorf("%s to %s: the doorbell is not there (its instance is ending, or has not made it yet)", d.HandOver, url)
		case err != nil:
			return fmt.Errorf("%s: %w", d.HandOver, err)
		case owner != d.ARN:
			// Only the instance itself or the stack's functions may tag one: someone made this
			// doorbell in the instance's name who is not it, to hear what is sent to it.
			return fmt.Errorf("%s to %s: not sent: the doorbell is tagged for %s, not for %s", d.HandOver, url, owner, d.ARN)
		}
		body, err := json.Marshal(d.HandOver)
		if err != nil {
			return fmt.Errorf("%s: %w", d.HandOver, err)
		}
		_, err = b.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(string(body))})
		switch {
		case awserr.IsNotFound(err):
			return fmt.Errorf("%s to %s: the doorbell is gone (its instance is ending)", d.HandOver, url)
		case err != nil:
			return fmt.Errorf("%s to %s: %w", d.HandOver, url, err)
		}
		return nil
	}))
	return errors.Join(errs...)
}

// parseHandOver reads a doorbell message: a hand-over, or (false) a plain ring.
func parseHandOver(body string) (HandOver, bool) {
	if body == Body || body == "" || body[0] != '{' {
		return HandOver{}, false
	}
	var h HandOver
	if json.Unmarshal([]byte(body), &h) != nil || h.Validate() != nil {
		return HandOver{}, false
	}
	return h, true
}

// mailboxSize is how many hand-overs an agent keeps, the oldest going first: one assignment at a
// time is served, and room is left for hand-overs of the current one that are not the control
// plane's (Take refuses them) beside the one that is.
const mailboxSize = 8

// Mailbox holds the hand-overs an agent's doorbell brought until the agent takes them. It lives
// in the agent's memory only: a restarted agent has an empty mailbox and asks again.
type Mailbox struct {
	// Refused, when set, is told of each hand-over Take finds for the assignment it waits for
	// whose secret is not the one the assignment names: sent by someone other than the control
	// plane that wrote it.
	Refused func(HandOver)

	mu     sync.Mutex
	held   []HandOver
	notify chan struct{} // closed and replaced on every put
}

// NewMailbox returns an empty mailbox.
func NewMailbox() *Mailbox { return &Mailbox{notify: make(chan struct{})} }

// Put keeps h (once: a hand-over sent again replaces itself), dropping the oldest beyond the size.
// Versions say nothing here: a hand-over's version is only what its sender claims.
func (m *Mailbox) Put(h HandOver) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.held = append(slices.DeleteFunc(m.held, func(o HandOver) bool { return o == h }), h)
	if len(m.held) > mailboxSize {
		m.held = m.held[len(m.held)-mailboxSize:]
	}
	close(m.notify)
	m.notify = make(chan struct{})
}

// Take removes and returns the hand-over of kind for run at version whose secret has sum (the
// assignment's HandOverSum), if it is held. Others for that assignment are removed and refused.
func (m *Mailbox) Take(run string, version int64, kind, sum string) (HandOver, bool) {
	m.mu.Lock()
	var (
		found   HandOver
		ok      bool
		refused []HandOver
	)
	kept := m.held[:0]
	for _, h := range m.held {
		switch {
		case h.Run != run || h.Version != version || h.Kind != kind:
			kept = append(kept, h)
		case !ok && sum != "" && state.SecretSum(h.Secret) == sum:
			found, ok = h, true
		default:
			refused = append(refused, h)
		}
	}
	m.held = kept
	m.mu.Unlock()
	for _, h := range refused {
		if m.Refused != nil {
			m.Refused(h)
		}
	}
	return found, ok
}

// Latest returns the newest hand-over held (the highest version), without taking it.
func (m *Mailbox) Latest() (HandOver, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var latest HandOver
	for _, h := range m.held {
		if h.Version > latest.Version {
			latest = h
		}
	}
	return latest, latest.Version > 0
}

// Wait takes the hand-over of kind for run at version whose secret has sum, waiting for it
// until ctx ends.
func (m *Mailbox) Wait(ctx context.Context, run string, version int64, kind, sum string) (HandOver, error) {
	for {
		m.mu.Lock()
		ch := m.notify
		m.mu.Unlock()
		if h, ok := m.Take(run, version, kind, sum); ok {
			return h, nil
		}
		select {
		case <-ctx.Done():
			return HandOver{}, ctx.Err()
		case <-ch:
		}
	}
}
