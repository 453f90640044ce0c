// Command bench measures Hangar against its targets on the local emulators and prints one
// markdown table (metric, measured, target, verdict). `make bench` runs it after starting the
// test bed. Each file of this package adds the rows of one part of Hangar.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"
)

// Row is one line of the table.
type Row struct {
	Metric   string
	Measured string
	Target   string
	OK       bool
	// Info marks a row measured for context, with no target to meet.
	Info bool
}

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
	rounds int
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var cfg benchConfig
	only := flag.String("only", "", "comma-separated suites to run (default: all)")
	flag.IntVar(&cfg.rounds, "rounds", 20, "repetitions of each timed measurement")
	flag.Parse()
	if err := run(ctx, cfg, *only); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg benchConfig, only string) error {
	if cfg.rounds < 1 {
		return fmt.Errorf("-rounds %d: want 1 or more", cfg.rounds)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	want := strings.FieldsFunc(only, func(r rune) bool { return r == ',' })
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
	fmt.Println("| metric | measured | target | |")
	fmt.Println("|---|---|---|---|")
	failed := 0
	for _, r := range rows {
		mark := "ok"
		switch {
		case r.Info:
			mark = "info"
		case !r.OK:
			mark = "MISSED"
			failed++
		}
		fmt.Printf("| %s | %s | %s | %s |\n", r.Metric, r.Measured, r.Target, mark)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d targets missed", failed, len(rows))
	}
	return nil
}

// percentile returns the p-th percentile (0..100) of ds, nearest-rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func secs(d time.Duration) string { return fmt.Sprintf("%.3f s", d.Seconds()) }
