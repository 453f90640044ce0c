package offers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// Items reads instances' items (*state.Store): the good ones, and state.ErrBadItem beside them
// when some could not be decoded.
type Items interface {
	GetMany(ctx context.Context, ids []string) (map[string]*state.Instance, error)
}

// Tidying bounds: a tidy reads at most maxTidyMessages offers (a pool that holds more is tidied
// a sample at a time, over several refreshes), and hides each for tidyVisibility at most should
// the tidy die holding it. An offer kept after renewAfter receives is sent again as a fresh
// message: every tidy and every claimer that passes an offer over receives it, and the queue's
// redrive policy moves a message received 50 times to the dead-letter queue as poison.
const (
	maxTidyMessages = 300
	tidyVisibility  = 30 * time.Second
	renewAfter      = 20
)

// TidyStats is what a tidy found and did.
type TidyStats struct {
	// Visible and InFlight are SQS's approximate counts of offers before the tidy: waiting, and
	// held by a claimer.
	Visible, InFlight int
	// Checked counts the offers read; Kept, those left in the queue (given back, or renewed).
	Checked, Kept int
	// Renewed counts the kept offers sent again as fresh messages (see renewAfter).
	Renewed int
	// Dropped counts the offers deleted: stale (the instance moved on, or is gone) or
	// duplicates of another offer of the same instance and version.
	Dropped int
	// Poison counts the offers moved to the dead-letter queue.
	Poison int
	// Reoffered counts the idle or stopped instances offered again: the pool held no offer of
	// theirs.
	Reoffered int
	// ItemsRead counts the items read to decide on offers and before republishing.
	ItemsRead int
	// Skipped says why the tidy read nothing ("" when it did).
	Skipped string
}

// Tidy makes the pool's offers agree with its items: afterwards every offer points at an
// instance that is idle (or stopped, for a stopped offer) at the offer's version, and every
// instance of offered that is still so has an offer.
//
// A stale offer is left by a claimer killed between its claim and its delete (the message comes
// back after its visibility timeout), by an instance that was stopped or terminated while
// offered, or by a republish that raced a claim. Claims never use one (the claim is conditional
// on the version), but each costs a claimer a write and takes a real offer's place in a receive.
// An instance without an offer is left by a release or refresh killed between its write and its
// publish: it idles, paid for, until its deadline. Counts cannot tell these apart (one of each
// leaves the depth right), so every offer is read.
//
// offered are the pool's idle and stopped instances as the caller read them. Tidy reads the
// queue's counts first (one request) and reads nothing while a claimer holds offers: it could
// not tell those from missing ones, and the next refresh tries again. Otherwise it receives the
// offers (as many as SQS counts, in batches of ten, holding them: a claim that starts meanwhile
// long-polls until they come back, a fraction of a second later), keeps those that match offered
// by instance and version, reads the items of the others (BatchGetItem) to decide, gives the kept
// ones back (or renews them), deletes the rest, and republishes the instances of offered that
// still match their item but had no offer, unless the counts show a claimer took offers
// meanwhile. SQS's counts are approximate: an offer they miss may be republished (a duplicate,
// which the next tidy deletes) and one they overcount costs the tidy one empty long poll.
func (q *Queue) Tidy(ctx context.Context, offered []state.Instance, items Items) (TidyStats, error) {
	var st TidyStats
	visible, inFlight, err := q.counts(ctx)
	if err != nil {
		return st, err
	}
	st.Visible, st.InFlight = visible, inFlight
	switch {
	case inFlight > 0:
		st.Skipped = fmt.Sprintf("%d offers held by claimers", inFlight)
		return st, nil
	case visible == 0 && len(offered) == 0:
		st.Skipped = "no offers and no idle or stopped instances"
		return st, nil
	}
	t := &tidy{q: q, items: items, want: map[string]int64{}, byID: map[string]*entry{}, seen: map[offerKey]*entry{}}
	for _, in := range offered {
		t.want[in.ID] = in.Version
	}
	complete, err := t.read(ctx, visible)
	if err == nil {
		err = t.decide(ctx)
	}
	// Settle every offer held whatever happened: held ones would stay hidden for the
	// visibility timeout. Undecided ones (an error above) are given back.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	errs := []error{err, t.settle(cctx)}
	if err == nil && complete {
		n, rerr := t.reoffer(cctx, offered)
		st.Reoffered, errs = n, append(errs, rerr)
	}
	st.Checked, st.Kept, st.Renewed, st.Dropped, st.Poison, st.ItemsRead = len(t.entries), t.kept, t.renewed, t.dropped, t.poison, t.itemsRead
	if err := errors.Join(errs...); err != nil {
		return st, fmt.Errorf("tidy the offers of pool %s: %w", q.pool, err)
	}
	return st, nil
}

type offerKey struct {
	id      string
	version int64
}

// What a tidy does with one offer.
type verdict int

const (
	undecided verdict = iota // its item must be read
	keep
	drop
	poisoned // moved to the dead-letter queue: deleted here
)

// entry is one message read: the latest receipt handle of its message id (SQS may deliver a
// message twice, and only the latest handle is valid) and what to do with it.
type entry struct {
	handle   string
	body     string
	msg      Message
	receives int
	verdict  verdict
}

// tidy is one Tidy in progress.
type tidy struct {
	q       *Queue
	items   Items
	want    map[string]int64 // offered: instance id → version
	entries []*entry
	byID    map[string]*entry   // by message id
	seen    map[offerKey]*entry // the first offer of each instance and version
	kept    int
	renewed int
	dropped int
	poison  int
	// itemsRead counts the items read.
	itemsRead int
	// keptIDs are the instances with a kept offer.
	keptIDs map[string]bool
}

// read receives the visible offers SQS counted and sorts them; it reports whether it saw the
// whole queue (every offer counted, or a receive came back empty) rather than stopping at
// maxTidyMessages.
func (t *tidy) read(ctx context.Context, visible int) (bool, error) {
	for len(t.entries) < max(visible, 1) {
		if len(t.entries) >= maxTidyMessages {
			return false, nil
		}
		out, err := t.q.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: &t.q.url, MaxNumberOfMessages: sqsBatch, WaitTimeSeconds: 1,
			VisibilityTimeout:           int32(tidyVisibility / time.Second),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		})
		if err != nil {
			return false, fmt.Errorf("receive from pool %s: %w", t.q.pool, err)
		}
		if len(out.Messages) == 0 {
			return true, nil
		}
		for _, m := range out.Messages {
			id, handle := aws.ToString(m.MessageId), aws.ToString(m.ReceiptHandle)
			if e, ok := t.byID[id]; ok {
				e.handle = handle // delivered again: only the latest handle is valid
				continue
			}
			receives, _ := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
			e := &entry{handle: handle, body: aws.ToString(m.Body), receives: receives}
			t.byID[id] = e
			t.entries = append(t.entries, e)
			t.sort(ctx, e)
		}
	}
	return true, nil
}

// sort files one offer: poison to the dead-letter queue, a duplicate to drop, one matching
// offered to keep, any other to decide on its item.
func (t *tidy) sort(ctx context.Context, e *entry) {
	m, err := ParseMessage(e.body, t.q.pool)
	if err != nil {
		if derr := t.q.deadLetter(ctx, e.body, err.Error()); derr != nil {
			e.verdict = keep // not moved: it stays, and claimers move it
			return
		}
		e.verdict = poisoned
		return
	}
	e.msg = m
	k := offerKey{m.InstanceID, m.Version}
	switch v, ok := t.want[m.InstanceID]; {
	case t.seen[k] != nil:
		e.verdict = drop // a second offer of the same instance and version
	case ok && v == m.Version:
		t.seen[k], e.verdict = e, keep
	default:
		t.seen[k] = e // undecided: its item is read
	}
}

// decide reads the items of the undecided offers: an offer stays only if its instance is idle
// (or stopped, for a stopped offer) at the offer's version, without a run.
func (t *tidy) decide(ctx context.Context) error {
	var ids []string
	for _, e := range t.entries {
		if e.verdict == undecided {
			ids = append(ids, e.msg.InstanceID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	its, err := t.items.GetMany(ctx, ids)
	t.itemsRead += len(its)
	if err != nil && !errors.Is(err, state.ErrBadItem) {
		return fmt.Errorf("read the items of %d offers: %w", len(ids), err) // they are given back
	}
	for _, e := range t.entries {
		if e.verdict != undecided {
			continue
		}
		if it, ok := its[e.msg.InstanceID]; ok && current(it, e.msg) {
			e.verdict = keep
		} else {
			e.verdict = drop // a bad item is not offerable either
		}
	}
	return nil
}

// current reports whether offer m still describes the instance of item it.
func current(it *state.Instance, m Message) bool {
	return it.Version == m.Version && it.State == m.State() && it.RunID == ""
}

// settle gives back the kept and undecided offers, sends a fresh copy of kept ones received
// renewAfter times or more (then deleting the old), and deletes the dropped and poisoned ones.
func (t *tidy) settle(ctx context.Context) error {
	var give, del, renew []string
	var renewed []*entry
	t.keptIDs = map[string]bool{}
	for _, e := range t.entries {
		switch e.verdict {
		case keep:
			t.kept++
			if e.msg.InstanceID != "" {
				t.keptIDs[e.msg.InstanceID] = true
			}
			if e.receives >= renewAfter && e.msg.InstanceID != "" {
				renew, renewed = append(renew, e.body), append(renewed, e)
				continue
			}
			give = append(give, e.handle)
		case undecided:
			give = append(give, e.handle)
		case drop:
			t.dropped++
			del = append(del, e.handle)
		case poisoned:
			t.poison++
			del = append(del, e.handle)
		}
	}
	var errs []error
	if len(renew) > 0 {
		if err := t.q.send(ctx, renew); err != nil {
			errs = append(errs, err)
			for _, e := range renewed {
				give = append(give, e.handle) // not sent again: the old one stays
			}
		} else {
			t.renewed = len(renewed)
			for _, e := range renewed {
				del = append(del, e.handle)
			}
		}
	}
	errs = append(errs, t.q.releaseBatch(ctx, give), t.q.deleteBatch(ctx, del))
	return errors.Join(errs...)
}

// reoffer publishes the instances of offered that had no offer, after reading their items
// again: only those still idle or stopped at the version read are offered, and none when SQS
// counts offers held by someone else (a claimer that received them after the tidy's first count:
// they are not missing).
func (t *tidy) reoffer(ctx context.Context, offered []state.Instance) (int, error) {
	var ids []string
	for _, in := range offered {
		if !t.keptIDs[in.ID] {
			ids = append(ids, in.ID)
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	if _, inFlight, err := t.q.counts(ctx); err != nil || inFlight > 0 {
		return 0, err
	}
	its, err := t.items.GetMany(ctx, ids)
	t.itemsRead += len(its)
	if err != nil && !errors.Is(err, state.ErrBadItem) {
		return 0, fmt.Errorf("read the items of %d instances without an offer: %w", len(ids), err)
	}
	var lost []*state.Instance
	for _, in := range offered {
		if it, ok := its[in.ID]; ok && !t.keptIDs[in.ID] && it.Version == in.Version && (it.State == state.Idle || it.State == state.Stopped) && it.RunID == "" {
			lost = append(lost, it)
		}
	}
	if len(lost) == 0 {
		return 0, nil
	}
	return len(lost), t.q.Publish(ctx, lost...)
}
