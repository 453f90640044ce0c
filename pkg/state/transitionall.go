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
// One lost condition never blocks the others. A transaction cancelled for some of its items
// resolves those (a *ConflictError with the item as it is, for a lost condition) and writes the
// rest one by one with Transition: bulk, then singles. A transaction whose fate is unknown (its
// answer lost after the SDK's retries) is followed by singles too; an item it did write is known
// by its conflict, which finds the item exactly as the change leaves it. A batch of one is a
// single write. A change that BatchErrors refuses fails alone, before any request.
func (s *Store) TransitionAll(ctx context.Context, changes []Change, befores []Instance) []Written {
	out := make([]Written, len(changes))
	now := s.now()
	var batch []int
	items := make([]types.TransactWriteItem, 0, min(len(changes), maxTransact))
	flush := func() {
		s.transact(ctx, now, changes, befores, batch, items, out)
		batch, items = batch[:0], items[:0]
	}
	for i, err := range BatchErrors(changes, befores) {
		var u *types.Update
		if err == nil {
			u, err = s.update(changes[i], now)
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		batch = append(batch, i)
		items = append(items, types.TransactWriteItem{Update: u})
		if len(batch) == maxTransact {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	return out
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

// transact writes one batch (indexes into changes, and their items) and fills out for it.
func (s *Store) transact(ctx context.Context, now time.Time, changes []Change, befores []Instance, batch []int, items []types.TransactWriteItem, out []Written) {
	written := func(i int) {
		in := changes[i].Apply(befores[i], now)
		out[i] = Written{Item: &in}
	}
	singly := func(i int) {
		if in, err := s.Transition(ctx, changes[i]); err != nil {
			out[i].Err = err
		} else {
			out[i].Item = in
		}
	}
	if len(batch) == 1 {
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
	if !errors.As(err, &cancelled) || len(cancelled.CancellationReasons) != len(batch) {
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
	// fault of its own, or a conflict with another writer in flight) is written alone.
	for k, i := range batch {
		r := cancelled.CancellationReasons[k]
		if r.Code != nil && *r.Code == codeConditionFailed {
			out[i].Err = changes[i].conflict(r.Item)
			continue
		}
		singly(i)
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
