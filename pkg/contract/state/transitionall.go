package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Written is the outcome of one change of a TransitionAll: the item as the change left it
// (Change.Apply on the item the caller gave), or the error that kept it from being written.
type Written struct {
	Item *Instance
	Err  error
}

// TransitionAll writes changes, each conditional as Transition's, in TransactWriteItems of up to
// 100: one request moves a whole provision's or release's instances. befores are the items the
// changes were made from (same order), so that what was written can be returned without a read.
//
// A change that ends a run on its instance (Change.Ends) writes the run's record too, as a Put
// in the same transaction (RunRecord): history costs no request of its own.
//
// One lost condition never blocks the others. A transaction cancelled for some of its items
// resolves those (a *ConflictError with the item as it is, for a lost condition) and writes the
// rest one by one with Transition: bulk, then singles. A transaction whose fate is unknown (its
// answer lost after the SDK's retries) is followed by singles too; an item it did write is known
// by its conflict, which finds the item exactly as the change leaves it. A batch of one is a
// single write (a transaction of two when it writes a record). A change that BatchErrors refuses fails alone, before any request.
func (s *Store) TransitionAll(ctx context.Context, changes []Change, befores []Instance) []Written {
	out := make([]Written, len(changes))
	now := s.now()
	var (
		batch []int
		items = make([]types.TransactWriteItem, 0, min(2*len(changes), maxTransact))
	)
	flush := func() {
		s.transact(ctx, now, changes, befores, batch, items, out)
		batch, items = batch[:0], items[:0]
	}
	for i, err := range BatchErrors(changes, befores) {
		var (
			u   *types.Update
			rec *types.Put
		)
		if err == nil {
			u, err = s.update(changes[i], now)
		}
		if err == nil {
			rec, err = s.record(changes[i], befores[i], now)
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		if len(items)+2 > maxTransact {
			flush()
		}
		batch = append(batch, i)
		items = append(items, types.TransactWriteItem{Update: u})
		if rec != nil {
			items = append(items, types.TransactWriteItem{Put: rec})
		}
	}
	if len(batch) > 0 {
		flush()
	}
	return out
}

// record is the Put of the run record c writes when it ends before's run (nil when it does not).
func (s *Store) record(c Change, before Instance, now time.Time) (*types.Put, error) {
	if !c.Ends(before) {
		return nil, nil
	}
	return recordOf(c, before, now, s.retention()).put(s.table)
}

// BatchErrors returns, for each change of a batch, what keeps it out before any request (nil for
// none): the change is invalid, it names an instance a change before it names (a transaction may
// touch an item once), or befores does not hold one item per change.
func BatchErrors(changes []Change, befores []Instance) []error {
	errs := make([]error, len(changes))
	seen := make(map[string]bool, len(changes))
	for i, c := range changes {
		switch err := c.Validate(); {
		case len(befores) != len(changes):
			errs[i] = fmt.Errorf("transition %d instances: %d items given: want one per change", len(changes), len(befores))
		case err != nil:
			errs[i] = err
		case seen[c.InstanceID]:
			errs[i] = fmt.Errorf("%s → %s of %s: the instance is changed twice in one batch", c.From, c.To, c.InstanceID)
		default:
			seen[c.InstanceID] = true
		}
	}
	return errs
}

// transact writes one batch (indexes into changes, and their items: each change's update, then
// its run record if it has one) and fills out for it.
func (s *Store) transact(ctx context.Context, now time.Time, changes []Change, befores []Instance, batch []int, items []types.TransactWriteItem, out []Written) {
	written := func(i int) {
		in := changes[i].Apply(befores[i], now)
		if in.State == Terminated {
			in.ExpiresAt = now.Add(s.retention()).Unix()
		}
		out[i] = Written{Item: &in}
	}
	singly := func(i int) {
		if in, err := s.transitionAlone(ctx, changes[i], befores[i]); err != nil {
			out[i].Err = err
		} else {
			out[i].Item = in
		}
	}
	if len(items) == 1 {
		singly(batch[0])
		return
	}
	_, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err == nil {
		for _, i := range batch {
			written(i)
		}
		return
	}
	var cancelled *types.TransactionCanceledException
	if !errors.As(err, &cancelled) || len(cancelled.CancellationReasons) != len(items) {
		if ctx.Err() != nil {
			err = fmt.Errorf("transition %d instances in one transaction: %w", len(batch), err)
			for _, i := range batch {
				out[i].Err = err
			}
			return
		}
		// The transaction's fate is unknown (the SDK's retries ran out, or its answer was lost):
		// each item is written alone, and one the transaction did write is known by its conflict,
		// which finds the item exactly as the change leaves it.
		for _, i := range batch {
			singly(i)
			var conflict *ConflictError
			if errors.As(out[i].Err, &conflict) && conflict.Current != nil && leftBy(changes[i], befores[i], now, conflict.Current) {
				out[i] = Written{Item: conflict.Current}
			}
		}
		return
	}
	// Cancelled: nothing was written. Lost conditions are settled here; every other item (no
	// fault of its own, or a conflict with another writer in flight) is written alone. The
	// reasons follow the items: each change's update, then its record.
	k := 0
	for _, i := range batch {
		r := cancelled.CancellationReasons[k]
		k++
		if k < len(items) && items[k].Put != nil {
			k++ // the change's run record: unconditional, never the cause
		}
		if r.Code != nil && *r.Code == codeConditionFailed {
			out[i].Err = changes[i].conflict(r.Item)
			continue
		}
		singly(i)
	}
}

// transitionAlone writes one change on its own: one UpdateItem, or, when it ends a run, a
// transaction of the update and the run's record (the record is never written without the
// change). A lost condition returns a *ConflictError with the item as it is.
func (s *Store) transitionAlone(ctx context.Context, c Change, before Instance) (*Instance, error) {
	now := s.now()
	rec, err := s.record(c, before, now)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return s.Transition(ctx, c)
	}
	u, err := s.update(c, now)
	if err != nil {
		return nil, err
	}
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Update: u}, {Put: rec}}})
	var cancelled *types.TransactionCanceledException
	switch {
	case err == nil:
		in := c.Apply(before, now)
		if in.State == Terminated {
			in.ExpiresAt = now.Add(s.retention()).Unix()
		}
		return &in, nil
	case errors.As(err, &cancelled) && len(cancelled.CancellationReasons) == 2 && cancelled.CancellationReasons[0].Code != nil &&
		*cancelled.CancellationReasons[0].Code == codeConditionFailed:
		return nil, c.conflict(cancelled.CancellationReasons[0].Item)
	default:
		return nil, fmt.Errorf("%s → %s of %s: %w", c.From, c.To, c.InstanceID, err)
	}
}

// leftBy reports whether cur is the item as c, written at about now on before, leaves it: its
// state, version, run and reason.
func leftBy(c Change, before Instance, now time.Time, cur *Instance) bool {
	want := c.Apply(before, now)
	return cur.State == want.State && cur.Version == want.Version && cur.RunID == want.RunID && cur.StateReason == want.StateReason
}

// codeConditionFailed is a cancellation reason's code for an item whose condition failed.
const codeConditionFailed = "ConditionalCheckFailed"
