package fake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/refresh/spend"
)

// history is a store's run records and cursors: what state.Store keeps beside the items in the
// same table (RunRecords, Cursor, AdvanceCursor), for spend.Publisher.
type history struct {
	mu      sync.Mutex
	records []state.RunRecord
	bad     []state.RunRecord // malformed: only Key, Pool and EndedAt count
	cursors map[string]time.Time
	broken  map[string]state.BrokenSpec // by pool
}

func (s *Store) history() *history {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hist == nil {
		s.hist = &history{cursors: map[string]time.Time{}, broken: map[string]state.BrokenSpec{}}
	}
	return s.hist
}

// PutRunRecord writes the record of a run that ended, as state.Store writes it with the transition
// that ends the run. The fake's transitions write none themselves: a test sets up the history it
// needs. EndedAt is kept as a read returns it (UTC, whole milliseconds).
func (s *Store) PutRunRecord(r state.RunRecord) {
	r.EndedAt, r.AssignedAt, r.RegisteredAt = stored(r.EndedAt), stored(r.AssignedAt), stored(r.RegisteredAt)
	if r.Kind == "" {
		r.Kind = state.KindRun
	}
	h := s.history()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r)
}

// PutBadRunRecord writes a malformed run record of pool, keyed key, that ended at endedAt: a read
// of a window that holds it leaves it out and names it in an error matching state.ErrBadItem,
// returned with the well-formed records, as state.Store.RunRecords does.
func (s *Store) PutBadRunRecord(pool, key string, endedAt time.Time) {
	h := s.history()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bad = append(h.bad, state.RunRecord{Key: key, Pool: pool, EndedAt: stored(endedAt)})
}

// RunRecords returns pool's run records that ended in [since, until), oldest first, as
// state.Store.RunRecords does.
func (s *Store) RunRecords(_ context.Context, pool string, since, until time.Time) ([]state.RunRecord, error) {
	if err := names.ValidatePool(pool); err != nil {
		return nil, err
	}
	if !until.After(since) {
		return nil, fmt.Errorf("history of pool %s: until %s is not after since %s", pool, until, since)
	}
	if err := s.call("RunRecords"); err != nil {
		return nil, err
	}
	h := s.history()
	h.mu.Lock()
	defer h.mu.Unlock()
	in := func(r state.RunRecord) bool {
		return r.Pool == pool && !r.EndedAt.Before(since) && r.EndedAt.Before(until)
	}
	var out []state.RunRecord
	for _, r := range h.records {
		if in(r) {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b state.RunRecord) int { return a.EndedAt.Compare(b.EndedAt) })
	var bad []error
	for _, r := range h.bad {
		if in(r) {
			bad = append(bad, fmt.Errorf("%w %s: decode a run record: malformed", state.ErrBadItem, r.Key))
		}
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("history of pool %s: %w", pool, errors.Join(bad...))
	}
	return out, nil
}

// Cursor returns the named cursor's position (zero when it was never advanced), in whole
// milliseconds as state.Store keeps it.
func (s *Store) Cursor(_ context.Context, name string) (time.Time, error) {
	if err := s.call("Cursor"); err != nil {
		return time.Time{}, err
	}
	h := s.history()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cursors[name], nil
}

// AdvanceCursor moves the named cursor from from (zero: never advanced) to to if, and only if, it
// is at from, as state.Store.AdvanceCursor's conditional write does; false when someone else moved
// it first.
func (s *Store) AdvanceCursor(_ context.Context, name string, from, to time.Time) (bool, error) {
	if !to.After(from) {
		return false, fmt.Errorf("advance cursor %s from %s to %s: want a later position", name, from, to)
	}
	if err := s.call("AdvanceCursor"); err != nil {
		return false, err
	}
	h := s.history()
	h.mu.Lock()
	defer h.mu.Unlock()
	cur, ok := h.cursors[name]
	if from.IsZero() && ok || !from.IsZero() && (!ok || cur.UnixMilli() != from.UnixMilli()) {
		return false, nil
	}
	h.cursors[name] = time.UnixMilli(to.UnixMilli())
	return true, nil
}

// The store is also the state table's history for the spend publisher.
var _ spend.Store = (*Store)(nil)

// MarkBroken records pool's broken spec as state.Store.MarkBroken does: a mark of the same spec
// is kept as it was.
func (s *Store) MarkBroken(_ context.Context, pool string, b state.BrokenSpec) error {
	if err := s.call("MarkBroken"); err != nil {
		return err
	}
	h := s.history()
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.broken[pool]; ok && old.Spec == b.Spec {
		return nil
	}
	b.At = time.UnixMilli(b.At.UnixMilli())
	h.broken[pool] = b
	return nil
}

// Broken returns pool's broken spec, nil when none was marked.
func (s *Store) Broken(_ context.Context, pool string) (*state.BrokenSpec, error) {
	if err := s.call("Broken"); err != nil {
		return nil, err
	}
	h := s.history()
	h.mu.Lock()
	defer h.mu.Unlock()
	b, ok := h.broken[pool]
	if !ok {
		return nil, nil
	}
	return &b, nil
}
