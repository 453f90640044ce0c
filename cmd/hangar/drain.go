package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hangar-ci/hangar/pkg/operator"
)

// newDrain is `hangar drain POOL` (drain true) or `hangar undrain POOL`.
func newDrain(g *globals, drain bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "drain POOL",
		Short: "close a pool to reuse: nothing offered or kept warm, idle instances terminated, running work finishes first",
		Long: `drain marks the pool's document drained, then terminates its idle, stopped and warm instances.
Instances serving runs finish them and are terminated when they end, never offered again. While
the pool is drained, runs and label-routed jobs get new instances (never a reused one), and
refresh keeps none warm. Use it before an image change to see every instance replaced, or to
take a pool out of service. hangar undrain opens it again; so does the next deploy of the stack,
which writes the document afresh.`,
		Args: exactArgs(1, "one pool name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := open(cmd.Context(), g)
			if err != nil {
				return err
			}
			var rep *operator.DrainReport
			if drain {
				rep, err = in.Drain(cmd.Context(), args[0])
			} else {
				rep, err = in.Undrain(cmd.Context(), args[0])
			}
			if rep != nil {
				if g.output == outputJSON {
					if werr := writeJSON(cmd.OutOrStdout(), rep); werr != nil {
						return werr
					}
				} else {
					drainText(cmd, rep)
				}
			}
			return err
		},
	}
	if !drain {
		cmd.Use = "undrain POOL"
		cmd.Short = "open a drained pool to reuse again; refresh fills its warm pool at its next pass"
		cmd.Long = `undrain removes the drained mark from the pool's document: its instances are offered again
after their runs, provision and the dispatcher claim from it, and refresh fills its warm pool at
its next pass.`
	}
	return cmd
}

func drainText(cmd *cobra.Command, rep *operator.DrainReport) {
	w := cmd.OutOrStdout()
	if !rep.Drained {
		fmt.Fprintf(w, "pool %s is open to reuse again; refresh fills its warm pool at its next pass\n", rep.Pool)
		return
	}
	fmt.Fprintf(w, "pool %s is drained: nothing of it is offered or kept warm\n", rep.Pool)
	fmt.Fprintf(w, "terminated now (idle, stopped, warm): %d %s\n", len(rep.Retired), strings.Join(rep.Retired, " "))
	fmt.Fprintf(w, "serving runs, terminated when they end: %d %s\n", len(rep.Serving), strings.Join(rep.Serving, " "))
	if len(rep.Lost) > 0 {
		fmt.Fprintf(w, "claimed meanwhile, terminated when their runs end: %d %s\n", len(rep.Lost), strings.Join(rep.Lost, " "))
	}
}
