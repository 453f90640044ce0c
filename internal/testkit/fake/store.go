package fake

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
)

// Store keeps state.Instance items in memory and applies the conditional writes of
// state.Store: a transition wins only if the item is in the change's from-state, at its version,
// in its pool, with the run the state machine requires (state.Change.RunMustMatch and
// RunMustBeAbsent), within the reuse scope (state.Claimable), with a fresh enough heartbeat
// (AliveSince) and, when asked, unacknowledged; a lost condition returns *state.ConflictError
// carrying the item as it was.
type Store struct {
	recorder
	account state.Account
	// Now is the clock for updatedAt, TTL and leases; time.Now when nil.
	Now func() time.Time

	mu      sync.Mutex
	items   map[string]*state.Instance
	waiters map[string]state.Waiter // jobs waiting for room, by pool/key
	leases  map[string]lease
	events  map[string]string // "<job>/<action>" → body: the webhook's records
	thefts  []*theft          // StealBefore
	hist    *history          // run records and cursors
	changed chan struct{}     // closed and replaced on every write, for Wait
}

type lease struct {
	holder string
	until  time.Time
}

// NewStore returns an empty store keying items by the ARNs of account.
func NewStore(account state.Account) *Store {
	return &Store{account: account, items: map[string]*state.Instance{}, leases: map[string]lease{}, changed: make(chan struct{})}
}

// Reset forgets every item, lease, run record, cursor, theft, recorded call and injected error.
func (s *Store) Reset() {
	s.mu.Lock()
	s.items, s.leases, s.events, s.thefts, s.hist, s.waiters = map[string]*state.Instance{}, map[string]lease{}, nil, nil, nil, nil
	s.mu.Unlock()
	s.resetCalls()
	s.notify()
}

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// stored returns t as a read returns it: UTC, whole milliseconds; zero stays zero.
func stored(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMilli(t.UnixMilli()).UTC()
}

// notify wakes every Wait. The caller must not hold s.mu.
func (s *Store) notify() {
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// clone returns a deep copy of in.
func clone(in *state.Instance) *state.Instance {
	out := *in
	out.Labels = slices.Clone(in.Labels)
	out.ServedRepos = slices.Clone(in.ServedRepos)
	out.ServedOwners = slices.Clone(in.ServedOwners)
	return &out
}

// Create writes new items in state created with version 1, all or none, each only if no item
// exists for its instance (state.PrepareNew checks and completes them, as state.Store.Create does).
func (s *Store) Create(_ context.Context, insts []*state.Instance) error {
	if err := s.call("Create"); err != nil {
		return err
	}
	now := s.now()
	for _, in := range insts {
		if err := state.PrepareNew(in, s.account, now); err != nil {
			return err
		}
	}
	s.mu.Lock()
	for _, in := range insts {
		if _, ok := s.items[in.ID]; ok {
			s.mu.Unlock()
			return fmt.Errorf("create %d instance items: transaction cancelled: an item for %s exists", len(insts), in.ID)
		}
	}
	for _, in := range insts {
		s.items[in.ID] = clone(in)
	}
	s.mu.Unlock()
	s.notify()
	return nil
}

// Put writes in as it is, replacing any item of its instance: a test's way to set up a world
// (an idle instance with a history, say). The ARN and index key are filled in when missing.
func (s *Store) Put(in state.Instance) {
	if in.ARN == "" {
		in.ARN = s.account.ARN(in.ID)
	}
	if in.State != state.Terminated && in.PoolStateShard == "" {
		in.PoolStateShard = state.PoolStateShard(in.Pool, in.State, in.ID)
	}
	s.mu.Lock()
	s.items[in.ID] = clone(&in)
	s.mu.Unlock()
	s.notify()
}

// Item returns a copy of instance id's whole item, or nil.
func (s *Store) Item(id string) *state.Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in, ok := s.items[id]; ok {
		return clone(in)
	}
	return nil
}

// Items returns copies of every item, by instance id.
func (s *Store) Items() map[string]*state.Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*state.Instance, len(s.items))
	for id, in := range s.items {
		out[id] = clone(in)
	}
	return out
}

// Get returns the item of instance id, or state.ErrNotFound.
func (s *Store) Get(_ context.Context, id string) (*state.Instance, error) {
	if err := names.ValidateInstanceID(id); err != nil {
		return nil, err
	}
	if err := s.call("Get"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.items[id]
	if !ok {
		return nil, fmt.Errorf("get instance %s: %w", id, state.ErrNotFound)
	}
	return clone(in), nil
}

// GetMany returns the items of ids that exist.
func (s *Store) GetMany(_ context.Context, ids []string) (map[string]*state.Instance, error) {
	for _, id := range ids {
		if err := names.ValidateInstanceID(id); err != nil {
			return nil, err
		}
	}
	if err := s.call("GetMany"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*state.Instance, len(ids))
	for _, id := range ids {
		if in, ok := s.items[id]; ok {
			out[id] = clone(in)
		}
	}
	return out, nil
}

// Poll reads the items of ids until check says done, as state.Store.Poll does (first read at
// once, then at growing jittered intervals up to interval), and also at once after every write.
func (s *Store) Poll(ctx context.Context, ids []string, interval time.Duration, check func(map[string]*state.Instance) (bool, time.Duration)) error {
	if interval <= 0 {
		return fmt.Errorf("poll: interval %s: want more than 0", interval)
	}
	var lastErr error
	delay := max(interval/4, time.Millisecond)
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		items, err := s.GetMany(ctx, ids)
		if err == nil {
			lastErr = nil
			// A planned read (the check's next) is not kept: this store wakes on every change.
			if done, _ := check(items); done {
				return nil
			}
		} else {
			lastErr = err
		}
		t := time.NewTimer(wait.Jitter(delay))
		select {
		case <-ctx.Done():
			t.Stop()
			if lastErr != nil {
				return fmt.Errorf("%w (last read: %w)", ctx.Err(), lastErr)
			}
			return ctx.Err()
		case <-changed:
			t.Stop()
		case <-t.C:
		}
		delay = min(delay*3/2, interval)
	}
}

// ByRun returns the instances that hold run (every state but terminated).
func (s *Store) ByRun(_ context.Context, run string) ([]state.Instance, error) {
	if err := names.ValidateAssignmentKey(run); err != nil {
		return nil, err
	}
	if err := s.call("ByRun"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []state.Instance
	for _, in := range s.items {
		if in.RunID == run {
			out = append(out, *clone(in))
		}
	}
	slices.SortFunc(out, func(a, b state.Instance) int { return a.Threshold.Compare(b.Threshold) })
	return out, nil
}

// InPoolState returns every instance of pool in state st, oldest deadline first.
func (s *Store) InPoolState(_ context.Context, pool string, st state.State) ([]state.Instance, error) {
	return s.poolState("InPoolState", pool, st, time.Time{})
}

// Expired returns the instances of pool in state st whose threshold is before now, oldest first.
func (s *Store) Expired(_ context.Context, pool string, st state.State, now time.Time) ([]state.Instance, error) {
	if now.IsZero() {
		return nil, fmt.Errorf("expired %s instances of pool %s: now is not set", st, pool)
	}
	return s.poolState("Expired", pool, st, now)
}

func (s *Store) poolState(op, pool string, st state.State, before time.Time) ([]state.Instance, error) {
	if err := names.ValidatePool(pool); err != nil {
		return nil, err
	}
	if !st.Valid() || st == state.Terminated {
		return nil, fmt.Errorf("state %q: want a live state (created, idle, claimed, running, stopped)", st)
	}
	if err := s.call(op); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []state.Instance
	for _, in := range s.items {
		if in.Pool != pool || in.State != st || in.PoolStateShard == "" {
			continue
		}
		if !before.IsZero() && in.Threshold.UnixMilli() >= before.UnixMilli() {
			continue
		}
		out = append(out, *clone(in))
	}
	slices.SortFunc(out, func(a, b state.Instance) int { return a.Threshold.Compare(b.Threshold) })
	return out, nil
}

// Lease takes the named lease for ttl if no one holds it or the holder's has run out.
func (s *Store) Lease(_ context.Context, name, holder string, ttl time.Duration) (bool, error) {
	if name == "" || holder == "" || ttl <= 0 {
		return false, fmt.Errorf("lease %q for %q, %s: want a name, a holder and a positive duration", name, holder, ttl)
	}
	if err := s.call("Lease"); err != nil {
		return false, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.leases[name]; ok && !l.until.Before(now) && !l.until.After(now.Add(ttl)) {
		return false, nil
	}
	s.leases[name] = lease{holder: holder, until: now.Add(ttl)}
	return true, nil
}

// ReleaseLease gives the named lease up if holder holds it.
func (s *Store) ReleaseLease(_ context.Context, name, holder string) error {
	if err := s.call("ReleaseLease"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.leases[name]; ok && l.holder == holder {
		s.leases[name] = lease{holder: holder}
	}
	return nil
}

// Wait blocks until cond holds for the store's items (checked at once and after every write)
// or ctx ends.
func (s *Store) Wait(ctx context.Context, cond func(items map[string]*state.Instance) bool) error {
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		if cond(s.Items()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// Census counts pool's live instances by state (and those created for a run), as
// state.Store.Census does.
func (s *Store) Census(_ context.Context, pool string) (state.Census, error) {
	if err := s.call("Census"); err != nil {
		return state.Census{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := state.Census{ByState: map[state.State]int{}, BySpec: map[string]int{}}
	for _, st := range state.LiveStates {
		out.ByState[st] = 0
	}
	for _, it := range s.items {
		if it.Pool != pool || !slices.Contains(state.LiveStates, it.State) {
			continue
		}
		out.ByState[it.State]++
		out.BySpec[it.SpecHash]++
		out.IDs = append(out.IDs, it.ID)
		if it.State == state.Created && it.RunID != "" {
			out.CreatedForRun++
		}
	}
	return out, nil
}

// AddWaiter keeps a job waiting for room (replacing one of the same pool and job).
func (s *Store) AddWaiter(_ context.Context, w state.Waiter) error {
	if err := s.call("AddWaiter"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiters == nil {
		s.waiters = map[string]state.Waiter{}
	}
	s.waiters[w.Pool+"/"+w.Key] = w
	return nil
}

// Waiters returns up to limit of pool's waiters, longest waiting first.
func (s *Store) Waiters(_ context.Context, pool string, limit int) ([]state.Waiter, error) {
	if err := s.call("Waiters"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []state.Waiter
	for _, w := range s.waiters {
		if w.Pool == pool {
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b state.Waiter) int { return cmp.Or(a.Since.Compare(b.Since), strings.Compare(a.Key, b.Key)) })
	return out[:min(limit, len(out))], nil
}

// NextRound moves a waiter of round from on to w.Round and w.Body; ok false when there is none
// of that round.
func (s *Store) NextRound(_ context.Context, w state.Waiter, from int) (bool, error) {
	if err := s.call("NextRound"); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.waiters[w.Pool+"/"+w.Key]
	if !ok || old.Round != from {
		return false, nil
	}
	old.Round, old.Body, old.Due = w.Round, w.Body, w.Due
	s.waiters[w.Pool+"/"+w.Key] = old
	return true, nil
}

// IsWaiting reports whether pool's job key is on its waiters.
func (s *Store) IsWaiting(_ context.Context, pool, key string) (bool, error) {
	if err := s.call("IsWaiting"); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.waiters[pool+"/"+key]
	return ok, nil
}

// TakeWaiter removes and returns a waiter of round (state.AnyRound: any); ok false when there was
// none.
func (s *Store) TakeWaiter(_ context.Context, pool, key string, round int) (state.Waiter, bool, error) {
	if err := s.call("TakeWaiter"); err != nil {
		return state.Waiter{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.waiters[pool+"/"+key]
	if !ok || (round != state.AnyRound && w.Round != round) {
		return state.Waiter{}, false, nil
	}
	delete(s.waiters, pool+"/"+key)
	return w, true, nil
}
