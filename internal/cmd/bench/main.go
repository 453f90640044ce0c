// Command bench is Hangar's scoreboard: it measures each target of docs/benchmarks.md on the local
// emulators, with the real step binaries and real agents, prints one markdown table (measured
// p50 / p95 where a figure varies, the target, the verdict, fleet-actions' figure for the same
// operation and the ratio) and writes the same rows to bench.json. `make bench` runs it after
// starting the test bed; it exits non-zero when a target is missed. Each file of this package
// adds the rows of one part of Hangar.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"
)

// Row is one line of the scoreboard.
type Row struct {
	Metric string `json:"metric"`
	// Unit is what Value, P50, P95, Limit and Seed count: "s", "requests", "items", "MB".
	Unit string `json:"unit"`
	// Value is the figure judged against Limit (the p50 or p95 the target names, or the count).
	Value float64 `json:"value"`
	// P50 and P95 are set where the figure varies over repeated runs.
	P50 *float64 `json:"p50,omitempty"`
	P95 *float64 `json:"p95,omitempty"`
	// Runs is how many measurements P50 and P95 come from.
	Runs int `json:"runs,omitempty"`
	// Limit is the target: Value ≤ Limit passes.
	Limit  float64 `json:"limit"`
	Target string  `json:"target"`
	OK     bool    `json:"ok"`
	// Seed is fleet-actions/ec2-runner-pool-manager's figure for the same operation on the same
	// emulators (0: none); Ratio is Seed ÷ Value (how many times better Hangar is).
	Seed  float64 `json:"fleetActions,omitempty"`
	Ratio float64 `json:"ratio,omitempty"`
	// Note says what the figure includes.
	Note string `json:"note,omitempty"`
}

// row builds a Row judged on value ≤ limit.
func row(metric, unit string, value, limit float64, target string) Row {
	return Row{Metric: metric, Unit: unit, Value: value, Limit: limit, Target: target, OK: value <= limit}
}

// timed builds a Row from repeated durations, judged on their p50 (or p95 when onP95).
func timed(metric string, ds []time.Duration, limit time.Duration, onP95 bool) Row {
	p50, p95 := percentile(ds, 50).Seconds(), percentile(ds, 95).Seconds()
	v, which := p50, "p50"
	if onP95 {
		v, which = p95, "p95"
	}
	r := row(metric, "s", v, limit.Seconds(), fmt.Sprintf("%s ≤ %s", which, secs(limit)))
	r.P50, r.P95, r.Runs = &p50, &p95, len(ds)
	return r
}

// vs sets the row's fleet-actions figure.
func (r Row) vs(seed float64) Row {
	r.Seed = seed
	if r.Value > 0 {
		r.Ratio = seed / r.Value
	}
	return r
}

func (r Row) note(s string) Row { r.Note = s; return r }

// suite is one group of rows.
type suite struct {
	name string
	run  func(ctx context.Context, cfg benchConfig) ([]Row, error)
}

var suites []suite

func register(name string, run func(ctx context.Context, cfg benchConfig) ([]Row, error)) {
	suites = append(suites, suite{name, run})
}

type benchConfig struct {
	rounds    int
	agentRuns int
	warmup    int
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var cfg benchConfig
	only := flag.String("only", "", "comma-separated suites to run (default: all): "+suiteNames())
	out := flag.String("json", "bench.json", "where to write the rows as JSON")
	flag.IntVar(&cfg.rounds, "rounds", 20, "repetitions of each timed provision and release")
	flag.IntVar(&cfg.agentRuns, "agent-runs", 100, "runs one agent serves (assignment noticed, memory growth)")
	flag.IntVar(&cfg.warmup, "warmup", 20, "unmeasured provisions of ten, and their releases, that warm the emulators before the suites (0: none)")
	flag.Parse()
	if err := run(ctx, cfg, *only, *out); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func suiteNames() string {
	var names []string
	for _, s := range suites {
		names = append(names, s.name)
	}
	return strings.Join(names, ", ")
}

func run(ctx context.Context, cfg benchConfig, only, out string) error {
	if cfg.rounds < 1 || cfg.agentRuns < 10 || cfg.warmup < 0 {
		return fmt.Errorf("-rounds %d, -agent-runs %d, -warmup %d: want 1 or more rounds, 10 or more agent runs and 0 or more warm-up rounds",
			cfg.rounds, cfg.agentRuns, cfg.warmup)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	want := strings.FieldsFunc(only, func(r rune) bool { return r == ',' })
	for _, w := range want {
		if !slices.ContainsFunc(suites, func(s suite) bool { return s.name == w }) {
			return fmt.Errorf("-only %s: no such suite; want some of %s", w, suiteNames())
		}
	}
	start := time.Now()
	if err := warmEmulators(ctx, cfg.warmup); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: emulators warmed by %d rounds in %s\n", cfg.warmup, time.Since(start).Round(time.Millisecond))
	var rows []Row
	for _, s := range suites {
		if len(want) > 0 && !slices.Contains(want, s.name) {
			continue
		}
		start := time.Now()
		r, err := s.run(ctx, cfg)
		if err != nil {
			return fmt.Errorf("suite %s: %w", s.name, err)
		}
		fmt.Fprintf(os.Stderr, "bench: %s done in %s\n", s.name, time.Since(start).Round(time.Millisecond))
		rows = append(rows, r...)
	}
	fmt.Print(table(rows))
	b, err := json.MarshalIndent(struct {
		At   time.Time `json:"at"`
		Rows []Row     `json:"rows"`
	}{time.Now().UTC(), rows}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	failed := 0
	for _, r := range rows {
		if !r.OK {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d targets missed", failed, len(rows))
	}
	return nil
}

// table renders rows as markdown.
func table(rows []Row) string {
	var b strings.Builder
	b.WriteString("| row | measured | target | verdict | fleet-actions | ratio |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		verdict := "pass"
		if !r.OK {
			verdict = "**MISSED**"
		}
		seed, ratio := "", ""
		if r.Seed > 0 {
			seed = format(r.Seed, r.Unit)
			ratio = fmt.Sprintf("%.1f×", r.Ratio)
		}
		metric := r.Metric
		if r.Note != "" {
			metric += " (" + r.Note + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", metric, measured(r), r.Target, verdict, seed, ratio)
	}
	return b.String()
}

func measured(r Row) string {
	if r.P50 != nil && r.P95 != nil {
		return fmt.Sprintf("p50 %s / p95 %s (%d runs)", format(*r.P50, r.Unit), format(*r.P95, r.Unit), r.Runs)
	}
	return format(r.Value, r.Unit)
}

func format(v float64, unit string) string {
	switch unit {
	case "s":
		return fmt.Sprintf("%.3f s", v)
	case "MB":
		return fmt.Sprintf("%.1f MB", v)
	default:
		if v == float64(int64(v)) {
			return fmt.Sprintf("%d %s", int64(v), unit)
		}
		return fmt.Sprintf("%.1f %s", v, unit)
	}
}

// percentile returns the p-th percentile (0..100) of ds, nearest-rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func secs(d time.Duration) string { return fmt.Sprintf("%.3f s", d.Seconds()) }
