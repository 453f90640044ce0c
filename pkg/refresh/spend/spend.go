package spend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/metrics"
)

// Store is the part of the state store spend uses: the run records of a window, and a cursor
// per pool that says up to when they were published.
type Store interface {
	RunRecords(ctx context.Context, pool string, since, until time.Time) ([]state.RunRecord, error)
	Cursor(ctx context.Context, name string) (time.Time, error)
	AdvanceCursor(ctx context.Context, name string, from, to time.Time) (bool, error)
}

// Config is the publisher's settings.
type Config struct {
	// Stack is the metrics' Stack dimension.
	Stack string
	// Lag is how far behind now a window ends (default 2 minutes): a record is stamped with its
	// writer's clock when it is written, so one written by a host whose clock runs up to Lag
	// behind still falls in a window not yet published.
	Lag time.Duration
	// MaxBacklog is how far back a window reaches at most (default 1 hour): after the refresh
	// function was off for longer, what ended before is not published (hangar cost still shows
	// it), rather than a burst stamped at the wrong time.
	MaxBacklog time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Validate applies the defaults and checks the settings.
func (c *Config) Validate() error {
	if c.Stack == "" {
		return errors.New("spend: Config.Stack is empty: want the stack's name")
	}
	if c.Lag == 0 {
		c.Lag = 2 * time.Minute
	}
	if c.MaxBacklog == 0 {
		c.MaxBacklog = time.Hour
	}
	if c.Lag < 0 || c.MaxBacklog < 0 {
		return fmt.Errorf("spend: Config.Lag %s, MaxBacklog %s: want positive durations", c.Lag, c.MaxBacklog)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// Publisher publishes the cost of ended runs. It is safe for concurrent use.
type Publisher struct {
	cfg   Config
	store Store
	out   *metrics.Writer
}

// New returns a publisher writing embedded-metric-format lines to out (a Lambda's stdout).
func New(store Store, out io.Writer, cfg Config) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil || out == nil {
		return nil, errors.New("spend: New needs a store and a writer")
	}
	return &Publisher{cfg: cfg, store: store, out: &metrics.Writer{Out: out, Now: cfg.Now}}, nil
}

// Metric names, in the Hangar namespace, with dimension sets {Stack, Pool, Repository} and
// {Stack, Pool}.
const (
	// MetricCost is what the runs held cost in US dollars: instance-seconds × each instance's
	// launch price; instances of unknown price are left out (MetricUnpricedSeconds).
	MetricCost = "RunCostUSD"
	// MetricSeconds is the instance-seconds runs held.
	MetricSeconds = "RunInstanceSeconds"
	// MetricUnpricedSeconds is the part of MetricSeconds whose price is unknown.
	MetricUnpricedSeconds = "RunUnpricedSeconds"
)

// Spend is what one repository's runs cost in a pool over a window.
type Spend struct {
	Repo            string
	Records         int
	Seconds         float64
	Cost            float64
	UnpricedSeconds float64
}

// Published is one window of a pool: what was published (nothing when another publisher took
// the window, or it was empty).
type Published struct {
	Pool        string
	From, Until time.Time
	// Taken says another publisher published this window first.
	Taken bool
	// Skipped names the records of the window left out as malformed (nil: none).
	Skipped error
	Spend   []Spend
}

// Publish publishes the cost of pool's run records that ended since the pool's cursor (at most
// MaxBacklog ago) and Lag before now, per repository, stamped at the window's end, then moves
// the cursor. The cursor moves first: a publisher that loses the move publishes nothing, so a
// window is published at most once (a crash between the move and the write loses it).
func (p *Publisher) Publish(ctx context.Context, pool string) (*Published, error) {
	name := "spend/" + pool
	cur, err := p.store.Cursor(ctx, name)
	if err != nil {
		return nil, err
	}
	until := p.cfg.Now().Add(-p.cfg.Lag).Truncate(time.Millisecond)
	from := cur
	if floor := until.Add(-p.cfg.MaxBacklog); from.Before(floor) {
		from = floor
	}
	out := &Published{Pool: pool, From: from, Until: until}
	if !until.After(from) {
		return out, nil
	}
	recs, err := p.store.RunRecords(ctx, pool, from, until)
	switch {
	case errors.Is(err, state.ErrBadItem):
		// A malformed record is left out (anyone who may write items could write one); were it
		// an error, it would stop every later window of the pool.
		out.Skipped = err
	case err != nil:
		return nil, fmt.Errorf("read the run records of pool %s: %w", pool, err)
	}
	moved, err := p.store.AdvanceCursor(ctx, name, cur, until)
	if err != nil {
		return nil, err
	}
	if !moved {
		out.Taken = true
		return out, nil
	}
	out.Spend = add(recs)
	for _, s := range out.Spend {
		p.out.EmitAt(until, map[string]string{"Stack": p.cfg.Stack, "Pool": pool, "Repository": s.Repo},
			[][]string{{"Stack", "Pool", "Repository"}, {"Stack", "Pool"}}, []metrics.Metric{
				{Name: MetricCost, Unit: "None", Value: s.Cost},
				{Name: MetricSeconds, Unit: "Seconds", Value: s.Seconds},
				{Name: MetricUnpricedSeconds, Unit: "Seconds", Value: s.UnpricedSeconds},
			})
	}
	return out, nil
}

// add sums records per repository, most expensive first.
func add(recs []state.RunRecord) []Spend {
	by := map[string]*Spend{}
	for _, r := range recs {
		repo := cmp.Or(r.Repo, "(none)") // a dimension's value may not be empty
		s := by[repo]
		if s == nil {
			s = &Spend{Repo: repo}
			by[repo] = s
		}
		s.Records++
		secs := r.Seconds()
		s.Seconds += secs
		if cost, ok := r.Cost(); ok {
			s.Cost += cost
		} else {
			s.UnpricedSeconds += secs
		}
	}
	out := make([]Spend, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b Spend) int { return cmp.Or(cmp.Compare(b.Cost, a.Cost), cmp.Compare(a.Repo, b.Repo)) })
	return out
}
