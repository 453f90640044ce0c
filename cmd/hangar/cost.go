package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/hangar-ci/hangar/pkg/operator"
)

func newCost(g *globals) *cobra.Command {
	var (
		f  windowFlags
		by string
	)
	cmd := &cobra.Command{
		Use:   "cost",
		Short: "what CI cost, by repository, pool, run or day",
		Long: `cost adds up, over the window, what runs held: each instance's seconds from its assignment
to its release (or now) × its hourly price, recorded when it was launched (spot: the spot price
history; on-demand: the AWS Price List). Grouped by pool it also shows what the pool's
instances cost in all, warm and idle time included. An instance whose price could not be had
is counted in hours under "price unknown", never priced.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w, err := f.window(time.Now())
			if err != nil {
				return err
			}
			if err := operator.CheckBy(by); err != nil {
				return err // before anything reaches AWS
			}
			in, err := open(cmd.Context(), g)
			if err != nil {
				return err
			}
			rows, err := in.Cost(cmd.Context(), by, w)
			if err != nil {
				return err
			}
			if g.output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), rows)
			}
			header := []string{"KEY", "RUNS", "INSTANCES", "INSTANCE-HOURS", "COST", "PRICE UNKNOWN (h)"}
			if by == operator.ByPool {
				header = append(header, "POOL INSTANCE-HOURS", "POOL COST")
			}
			out := make([][]string, len(rows))
			total := 0.0
			for k, r := range rows {
				out[k] = []string{r.Key, strconv.Itoa(r.Runs), strconv.Itoa(r.Instances), fmt.Sprintf("%.3f", r.Hours),
					operator.Dollars(r.Cost), fmt.Sprintf("%.3f", r.UnknownHours)}
				if by == operator.ByPool {
					out[k] = append(out[k], fmt.Sprintf("%.3f", r.PoolHours), operator.Dollars(r.PoolCost))
				}
				total += r.Cost
			}
			if err := table(cmd.OutOrStdout(), header, out); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "\ntotal held by runs since %s: %s\n", w.Since.UTC().Format(time.DateTime), operator.Dollars(total))
			return err
		},
	}
	f.add(cmd, "30d")
	cmd.Flags().StringVar(&by, "by", operator.ByRepository, "group by repository, pool, run or day")
	_ = cmd.RegisterFlagCompletionFunc("by", cobra.FixedCompletions([]string{operator.ByRepository, operator.ByPool, operator.ByRun, operator.ByDay}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
