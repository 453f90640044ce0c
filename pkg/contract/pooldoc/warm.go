package pooldoc

import (
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // schedules name IANA zones; the Lambda and the agent must not depend on the host's zoneinfo
)

// Warm is the pool's warm-pool sizing: schedules matched in the pool's time zone.
type Warm struct {
	Timezone  string     `json:"timezone,omitempty"`
	Schedules []Schedule `json:"schedules,omitempty"`
}

// Schedule is one named warm size. It matches when the local weekday is one of Days (all days
// when empty) and the local time is in [From, To) (all day when both are empty; a To before From
// crosses midnight). The first matching schedule wins.
type Schedule struct {
	Name    string   `json:"name"`
	Days    []string `json:"days,omitempty"`
	From    string   `json:"from,omitempty"`
	To      string   `json:"to,omitempty"`
	Hot     int      `json:"hot"`
	Stopped int      `json:"stopped"`
}

// Target is the warm size in force.
type Target struct {
	Schedule string // the matching schedule's name; "" when none matched
	Hot      int    // idle instances kept running
	Stopped  int    // idle instances kept stopped
}

var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

// weekday parses a day as its three-letter or full English name, in any case.
func weekday(s string) (time.Weekday, bool) {
	s = strings.ToLower(s)
	if len(s) > 3 {
		for d := time.Sunday; d <= time.Saturday; d++ {
			if strings.ToLower(d.String()) == s {
				return d, true
			}
		}
		return 0, false
	}
	d, ok := weekdays[s]
	return d, ok
}

// maxWarm bounds hot and stopped counts of one schedule.
const maxWarm = 500

func (w Warm) validate(pool string) []error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("pool %q: warm.%s: %s", pool, field, fmt.Sprintf(format, a...)))
	}
	if _, err := time.LoadLocation(w.Timezone); err != nil {
		bad("timezone", "%q: want an IANA time zone such as Europe/Paris (empty for UTC)", w.Timezone)
	}
	for i, s := range w.Schedules {
		field := fmt.Sprintf("schedules[%d]", i)
		if s.Name == "" {
			bad(field+".name", "empty: want a name")
		}
		for _, d := range s.Days {
			if _, ok := weekday(d); !ok {
				bad(field+".days", "%q: want mon, tue, wed, thu, fri, sat or sun", d)
			}
		}
		if (s.From == "") != (s.To == "") {
			bad(field, "from %q, to %q: give both or neither", s.From, s.To)
		} else if s.From != "" {
			f, err1 := parseHHMM(s.From)
			t, err2 := parseHHMM(s.To)
			switch {
			case err1 != nil:
				bad(field+".from", "%v", err1)
			case err2 != nil:
				bad(field+".to", "%v", err2)
			case f == t:
				bad(field, "from and to are both %s: an empty window never matches", s.From)
			}
		}
		if s.Hot < 0 || s.Hot > maxWarm || s.Stopped < 0 || s.Stopped > maxWarm {
			bad(field, "hot %d, stopped %d: want 0 to %d each", s.Hot, s.Stopped, maxWarm)
		}
	}
	return errs
}

// TargetAt returns the warm size in force at t: the first schedule that matches, or zero.
func (w Warm) TargetAt(t time.Time) Target {
	loc, err := time.LoadLocation(w.Timezone)
	if err != nil {
		loc = time.UTC // Validate refuses a bad zone; this only keeps TargetAt total
	}
	local := t.In(loc)
	minute := local.Hour()*60 + local.Minute()
	for _, s := range w.Schedules {
		if s.matches(local.Weekday(), minute) {
			return Target{Schedule: s.Name, Hot: s.Hot, Stopped: s.Stopped}
		}
	}
	return Target{}
}

func (s Schedule) matches(day time.Weekday, minute int) bool {
	if len(s.Days) > 0 {
		found := false
		for _, d := range s.Days {
			if wd, ok := weekday(d); ok && wd == day {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if s.From == "" {
		return true
	}
	from, err1 := parseHHMM(s.From)
	to, err2 := parseHHMM(s.To)
	if err1 != nil || err2 != nil {
		return false
	}
	if from < to {
		return minute >= from && minute < to
	}
	return minute >= from || minute < to // crosses midnight
}
