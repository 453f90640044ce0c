package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/hangar-ci/hangar/pkg/state"
)

// Items reads instances' items (*state.Store): the good ones, and state.ErrBadItem beside them
// when some could not be decoded.
type Items interface {
	GetMany(ctx context.Context, ids []string) (map[string]*state.Instance, error)
}

// Tidying bounds: a tidy reads at most maxTidyMessages offers (a pool that holds more is tidied
// a sample at a time, over several refreshes), and hides each for tidyVisibility at most should
// the tidy die holding it.
const (
	maxTidyMessages = 300
	tidyVisibility  = 30 * time.Second
)

// TidyStats is what a tidy found and did.
type TidyStats struct {
	// Visible and InFlight are SQS's approximate counts of offers before the tidy: waiting, and
	// held by a claimer.
	Visible, InFlight int
	// Checked counts the offers read; Kept, those given back as they were.
	Checked, Kept int
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
// instance of offered that is still so has exactly one offer.
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
// offers (up to as many as SQS counts, in batches of ten, holding them: a claim that starts
// meanwhile long-polls until they come back, a fraction of a second later), keeps those that
// match offered by instance and version, reads the items of the others (BatchGetItem) to decide,
// gives the kept ones back, deletes the rest and republishes the instances of offered that
// still match their item but had no offer.
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
	t := &tidy{q: q, items: items, want: map[string]int64{}, seen: map[offerKey]bool{}}
	for _, in := range offered {
		t.want[in.ID] = in.Version
	}
	complete, err := t.read(ctx, visible)
	st.Checked, st.Poison = t.checked, t.poison
	if err == nil {
		err = t.decide(ctx)
	}
	// Give back and delete whatever happened: held offers would stay hidden for the visibility
	// timeout.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	errs := []error{err, q.releaseBatch(cctx, t.keep), q.deleteBatch(cctx, t.drop)}
	if err == nil && complete {
		n, rerr := t.reoffer(cctx, offered)
		st.Reoffered, errs = n, append(errs, rerr)
	}
	st.Kept, st.Dropped, st.ItemsRead = len(t.keep), t.dropped, t.itemsRead
	if err := errors.Join(errs...); err != nil {
		return st, fmt.Errorf("tidy the offers of pool %s: %w", q.pool, err)
	}
	return st, nil
}

type offerKey struct {
	id      string
	version int64
}

// tidy is one Tidy in progress.
type tidy struct {
	q     *Queue
	items Items
	want  map[string]int64 // offered: instance id → version
	seen  map[offerKey]bool
	// undecided are the offers that need their item read, by receipt handle.
	undecided map[string]Message
	keep      []string // receipt handles to give back
	drop      []string // receipt handles to delete
	kept      map[string]bool
	checked   int
	poison    int // moved to the dead-letter queue
	dropped   int // stale or duplicate
	itemsRead int // items read
}

// read receives the visible offers SQS counted and sorts them; it reports whether it saw the
// whole queue (every offer counted, or a receive came back empty) rather than stopping at
// maxTidyMessages.
func (t *tidy) read(ctx context.Context, visible int) (bool, error) {
	t.undecided, t.kept = map[string]Message{}, map[string]bool{}
	for t.checked < max(visible, 1) {
		if t.checked >= maxTidyMessages {
			return false, nil
		}
		out, err := t.q.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: &t.q.url, MaxNumberOfMessages: sqsBatch, WaitTimeSeconds: 1,
			VisibilityTimeout: int32(tidyVisibility / time.Second),
		})
		if err != nil {
			return false, fmt.Errorf("receive from pool %s: %w", t.q.pool, err)
		}
		if len(out.Messages) == 0 {
			return true, nil
		}
		for _, m := range out.Messages {
			t.checked++
			t.sort(ctx, aws.ToString(m.ReceiptHandle), aws.ToString(m.Body))
		}
	}
	return true, nil
}

// sort files one offer: poison to the dead-letter queue, a duplicate to drop, one matching
// offered to keep, any other to decide on its item.
func (t *tidy) sort(ctx context.Context, handle, body string) {
	m, err := ParseMessage(body, t.q.pool)
	if err != nil {
		t.poison++
		if derr := t.q.deadLetter(ctx, body, err.Error()); derr != nil {
			t.keep = append(t.keep, handle) // not moved: it stays, and claimers move it
			return
		}
		t.drop = append(t.drop, handle)
		return
	}
	k := offerKey{m.InstanceID, m.Version}
	switch v, ok := t.want[m.InstanceID]; {
	case t.seen[k]:
		t.dropped++
		t.drop = append(t.drop, handle) // a second offer of the same instance and version
	case ok && v == m.Version:
		t.seen[k], t.kept[m.InstanceID] = true, true
		t.keep = append(t.keep, handle)
	default:
		t.seen[k] = true
		t.undecided[handle] = m
	}
}

// decide reads the items of the undecided offers: an offer stays only if its instance is idle
// (or stopped, for a stopped offer) at the offer's version, without a run.
func (t *tidy) decide(ctx context.Context) error {
	if len(t.undecided) == 0 {
		return nil
	}
	ids := make([]string, 0, len(t.undecided))
	for _, m := range t.undecided {
		ids = append(ids, m.InstanceID)
	}
	its, err := t.items.GetMany(ctx, ids)
	t.itemsRead += len(its)
	if err != nil && !errors.Is(err, state.ErrBadItem) {
		// Undecided offers are kept: without their items, none is known to be stale.
		for h := range t.undecided {
			t.keep = append(t.keep, h)
		}
		return fmt.Errorf("read the items of %d offers: %w", len(ids), err)
	}
	for h, m := range t.undecided {
		if it, ok := its[m.InstanceID]; ok && current(it, m) {
			t.kept[m.InstanceID] = true
			t.keep = append(t.keep, h)
			continue
		}
		t.dropped++
		t.drop = append(t.drop, h) // a bad item is not offerable either
	}
	return nil
}

// current reports whether offer m still describes the instance of item it.
func current(it *state.Instance, m Message) bool {
	return it.Version == m.Version && it.State == m.State() && it.RunID == ""
}

// reoffer publishes the instances of offered that had no offer, after reading their items
// again: only those still idle or stopped at the version read are offered.
func (t *tidy) reoffer(ctx context.Context, offered []state.Instance) (int, error) {
	var ids []string
	for _, in := range offered {
		if !t.kept[in.ID] {
			ids = append(ids, in.ID)
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	its, err := t.items.GetMany(ctx, ids)
	t.itemsRead += len(its)
	if err != nil && !errors.Is(err, state.ErrBadItem) {
		return 0, fmt.Errorf("read the items of %d instances without an offer: %w", len(ids), err)
	}
	var lost []*state.Instance
	for _, in := range offered {
		if it, ok := its[in.ID]; ok && !t.kept[in.ID] && it.Version == in.Version && (it.State == state.Idle || it.State == state.Stopped) && it.RunID == "" {
			lost = append(lost, it)
		}
	}
	if len(lost) == 0 {
		return 0, nil
	}
	return len(lost), t.q.Publish(ctx, lost...)
}
