package state

import (
	"slices"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
)

// Apply returns in as the change c leaves it when its write wins at now: what Transition writes,
// worked out without a request. TransitionAll returns it for the items a transaction wrote (a
// transaction returns no item), and the stateful fakes keep their items with it; a test on the
// emulator holds it to the table's own result. Times are kept to the millisecond, as stored.
func (c Change) Apply(in Instance, now time.Time) Instance {
	in.Labels, in.ServedRepos, in.ServedOwners = slices.Clone(in.Labels), slices.Clone(in.ServedRepos), slices.Clone(in.ServedOwners)
	in.State, in.Version, in.UpdatedAt, in.StateReason = c.To, c.Version+1, storedTime(now), c.Reason
	if c.To == Terminated {
		in.Threshold, in.PoolStateShard = storedTime(now), PoolStateShard(c.Pool, Terminated, c.InstanceID)
		in.Assignment = Assignment{}
		in.ExpiresAt = now.Add(DefaultHistoryRetention).Unix()
		if c.RunID != "" {
			in.LastRunID = c.RunID
		}
	} else {
		in.Threshold = storedTime(c.Threshold)
		in.PoolStateShard = PoolStateShard(c.Pool, c.To, c.InstanceID)
	}
	switch {
	case c.Assign != nil:
		a := *c.Assign
		a.Labels = slices.Clone(a.Labels)
		a.AssignedAt, a.Claimed, a.RegisteredAt, a.TookJob = storedTime(now), true, time.Time{}, 0
		in.Assignment = a
		in.ServedRepos = addToSet(in.ServedRepos, a.Repo)
		in.ServedOwners = addToSet(in.ServedOwners, names.Owner(a.Repo))
		if h := c.Home; h != nil {
			in.IdleSecs, in.Queue, in.HistoryDays = h.IdleSecs, h.Queue, h.HistoryDays
			if h.Retire != "" {
				in.Retire = h.Retire
			}
		}
	case c.Releases():
		if !c.Unacknowledged {
			in.LastRunID = c.RunID
		}
		in.Assignment = Assignment{}
		if c.RegisterFailed {
			in.RegisterFailures++
		}
	}
	if c.To == Running {
		in.RegisterFailures = 0
		in.RegisteredAt = storedTime(now)
		if c.TookJob != 0 {
			in.TookJob = c.TookJob
		}
	}
	return in
}

// addToSet adds v to a string set, kept sorted.
func addToSet(set []string, v string) []string {
	if slices.Contains(set, v) {
		return set
	}
	set = append(set, v)
	slices.Sort(set)
	return set
}
