package operator

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseSince reads how far back to look: a duration in days, hours or minutes (30d, 12h, 90m)
// or a UTC date (2026-11-01), and returns the moment it names, relative to now. Anything else is
// bad input naming the accepted forms.
func ParseSince(s string, now time.Time) (time.Time, error) {
	bad := fmt.Errorf("%w: --since %q: want a duration like 30d, 12h or 90m, or a date like 2026-11-01", ErrBadInput, s)
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		if t.After(now) {
			return time.Time{}, fmt.Errorf("%w: --since %q: the date is in the future", ErrBadInput, s)
		}
		return t, nil
	}
	if len(s) < 2 {
		return time.Time{}, bad
	}
	n, err := strconv.Atoi(s[:len(s)-1])
	if err != nil || n <= 0 || n > 3650*24*60 {
		return time.Time{}, bad
	}
	var unit time.Duration
	switch strings.ToLower(s[len(s)-1:]) {
	case "d":
		unit = 24 * time.Hour
	case "h":
		unit = time.Hour
	case "m":
		unit = time.Minute
	default:
		return time.Time{}, bad
	}
	return now.Add(-time.Duration(n) * unit), nil
}

// NewWindow is the window of history from since (ParseSince's forms) to now, of the named pools
// (every pool when none) and repository (owner/name; every one when empty). Malformed input is
// bad input naming the flag and the accepted form.
func NewWindow(since, repo string, pools []string, now time.Time) (Window, error) {
	from, err := ParseSince(since, now)
	if err != nil {
		return Window{}, err
	}
	if repo != "" && strings.Count(repo, "/") != 1 {
		return Window{}, fmt.Errorf("%w: --repo %q: want owner/name", ErrBadInput, repo)
	}
	return Window{Since: from, Until: now, Pools: pools, Repo: repo}, nil
}
