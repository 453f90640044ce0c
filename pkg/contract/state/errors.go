package state

import (
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ErrNotFound is returned when an instance has no item.
var ErrNotFound = errors.New("instance not found")

// ErrBadItem is matched (errors.Is) by the error of a read that left out items that are not
// well-formed Hangar instances; the read still returns every other item.
var ErrBadItem = errors.New("item left out, not a well-formed Hangar instance")

// ErrConflict is matched (errors.Is) by every *ConflictError.
var ErrConflict = errors.New("conditional write lost")

// ConflictError is a transition whose condition failed: another writer moved the instance first,
// or the caller's view was stale. Current is the item as it was when the write was refused (nil
// when there is no item). Nothing was written.
type ConflictError struct {
	InstanceID string
	From, To   State
	RunID      string // the run the caller expected ("" when none)
	Version    int64  // the version the caller expected
	Current    *Instance
}

func (e *ConflictError) Error() string {
	want := fmt.Sprintf("%s (version %d)", e.From, e.Version)
	if e.RunID != "" {
		want = fmt.Sprintf("%s for run %s (version %d)", e.From, e.RunID, e.Version)
	}
	if e.Current == nil {
		return fmt.Sprintf("%s → %s of instance %s lost: the instance has no item, want %s", e.From, e.To, e.InstanceID, want)
	}
	marked := ""
	if e.Current.Retire != "" {
		marked = fmt.Sprintf(", marked to retire (%s)", e.Current.Retire)
	}
	return fmt.Sprintf("%s → %s of instance %s lost: it is %s%s, want %s", e.From, e.To, e.InstanceID, e.Current.Holder(), marked, want)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Holder says who holds the instance: its state, run and version, for error messages and logs.
func (i *Instance) Holder() string {
	if i.RunID != "" {
		return fmt.Sprintf("%s by run %s (version %d)", i.State, i.RunID, i.Version)
	}
	return fmt.Sprintf("%s (version %d)", i.State, i.Version)
}

// conditionItem returns the item a lost conditional write found (DynamoDB returns it with
// ReturnValuesOnConditionCheckFailure ALL_OLD; empty when there was none). Whether err is a lost
// conditional write at all is awserr's to say.
func conditionItem(err error) map[string]types.AttributeValue {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item
	}
	return nil
}
