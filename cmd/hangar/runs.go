package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hangar-ci/hangar/pkg/operator"
)

// windowFlags are the flags that choose a span of history.
type windowFlags struct {
	since string
	pools []string
	repo  string
}

func (f *windowFlags) add(cmd *cobra.Command, since string) {
	cmd.Flags().StringVar(&f.since, "since", since, "how far back: a duration (30d, 12h, 90m) or a date (2026-11-01)")
	cmd.Flags().StringSliceVar(&f.pools, "pool", nil, "only these pools (repeat, or a,b; default every pool)")
	cmd.Flags().StringVar(&f.repo, "repo", "", "only this repository (owner/name)")
}

func (f *windowFlags) window(now time.Time) (operator.Window, error) {
	return operator.NewWindow(f.since, f.repo, f.pools, now)
}

func newRuns(g *globals) *cobra.Command {
	var (
		f     windowFlags
		limit int
	)
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "recent runs: repository, instances reused or created, provision and release times, outcome, cost",
		Long: `runs lists the run attempts that held instances in the window, newest first: those still
holding instances and those that let them go (from the run records the stack keeps for its
history.days, 90 by default). For each: its repository, instances (reused from the pool or created), how long until
the last of them registered, when the last was let go, the outcome (released, running, or the
terminations and why) and the cost (instance-seconds × each instance's price; instances whose
price is unknown are counted apart, never priced).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			now := time.Now()
			w, err := f.window(now)
			if err != nil {
				return err
			}
			if limit < 1 {
				return fmt.Errorf("%w: --limit %d: want 1 or more", errBadInput, limit)
			}
			in, err := open(cmd.Context(), g)
			if err != nil {
				return err
			}
			runs, err := in.Runs(cmd.Context(), w)
			if err != nil {
				return err
			}
			if len(runs) > limit {
				runs = runs[:limit]
			}
			if g.output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), runs)
			}
			rows := make([][]string, len(runs))
			for k, r := range runs {
				ended := "-"
				if !r.Ended.IsZero() {
					ended = r.Ended.UTC().Format("2006-01-02 15:04:05Z")
				}
				run, attempt, outcome := r.Run, strconv.Itoa(r.Attempt), r.Outcome
				if j := r.Job; j != nil {
					// A label-routed job: GitHub's names for it, and what became of its runner.
					run, attempt, outcome = jobText(*j), "-", outcome+"; "+j.Ran()
				}
				rows[k] = []string{run, attempt, r.Repo, strings.Join(r.Pools, ","),
					fmt.Sprintf("%d (%d reused, %d created)", r.Instances, r.Reused, r.Created),
					r.Started.UTC().Format("2006-01-02 15:04:05Z"), operator.SecondsText(r.ProvisionSeconds), ended, outcome, operator.CostText(r.Cost, r.PriceUnknown)}
			}
			return table(cmd.OutOrStdout(), []string{"RUN", "ATTEMPT", "REPOSITORY", "POOLS", "INSTANCES", "STARTED", "PROVISIONED IN", "ENDED", "OUTCOME", "COST"}, rows)
		},
	}
	f.add(cmd, "7d")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many runs, newest first")
	return cmd
}

// jobText names a label-routed job in the runs table: job <id> and, when GitHub named them, its
// workflow and name.
func jobText(j operator.JobView) string {
	switch {
	case j.Workflow != "" && j.Name != "":
		return fmt.Sprintf("job %d (%s / %s)", j.ID, j.Workflow, j.Name)
	case j.Name != "":
		return fmt.Sprintf("job %d (%s)", j.ID, j.Name)
	}
	return fmt.Sprintf("job %d", j.ID)
}
