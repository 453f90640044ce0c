package fake

import (
	"context"
	"fmt"
)

// RecordEvent records the webhook's action for job once, as state.Store does: false when it was
// recorded before.
func (s *Store) RecordEvent(_ context.Context, job int64, action, body string) (bool, error) {
	if err := s.call("RecordEvent"); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events == nil {
		s.events = map[string]string{}
	}
	key := fmt.Sprintf("%d/%s", job, action)
	if _, ok := s.events[key]; ok {
		return false, nil
	}
	s.events[key] = body
	return true, nil
}

// Events returns the bodies kept with action for those of jobs that have it recorded.
func (s *Store) Events(_ context.Context, action string, jobs []int64) (map[int64]string, error) {
	if err := s.call("Events"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int64]string{}
	for _, j := range jobs {
		if b, ok := s.events[fmt.Sprintf("%d/%s", j, action)]; ok {
			out[j] = b
		}
	}
	return out, nil
}

// ForgetEvent removes an event's record, as state.Store does.
func (s *Store) ForgetEvent(_ context.Context, job int64, action string) error {
	if err := s.call("ForgetEvent"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.events, fmt.Sprintf("%d/%s", job, action))
	return nil
}
