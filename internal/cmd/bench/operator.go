package main

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
)

// operatorRuns is how many times each hangar command is timed.
const operatorRuns = 5

// operatorTarget bounds each hangar read over the seeded stack: "well under a second".
const operatorTarget = time.Second

// operatorRows times hangar status and hangar runs on the stack refresh's bench seeded (10,000
// instances in one pool, each holding a run), as an operator would run them: the built
// binary, process start to exit.
func operatorRows(ctx context.Context, e *localenv.Env) ([]Row, error) {
	bin, err := testbuild.Build("github.com/hangar-ci/hangar/cmd/hangar")
	if err != nil {
		return nil, err
	}
	var rows []Row
	for _, args := range [][]string{{"status"}, {"runs", "--since", "1d", "--limit", "20"}} {
		var ds []time.Duration
		for range operatorRuns {
			cmd := exec.CommandContext(ctx, bin, append(args, "--stack", e.Stack, "--output", "json")...)
			cmd.Env = e.Environ()
			start := time.Now()
			out, err := cmd.CombinedOutput()
			if err != nil {
				return nil, fmt.Errorf("hangar %v: %w: %s", args, err, out)
			}
			ds = append(ds, time.Since(start))
		}
		rows = append(rows, timed(fmt.Sprintf("hangar %s over %d instances: process start → answer", args[0], refreshItems), ds, operatorTarget, false).
			note("the built command, its reads through the table's index, no Scan"))
	}
	return rows, nil
}
