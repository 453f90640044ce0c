package main

import "github.com/spf13/cobra"

// newRefresh is `hangar refresh`, the action's mode: refresh. Its flags and the action's inputs
// (INPUT_*, HANGAR_*) are parsed by the step itself (step.Inputs), as the action passes them.
func newRefresh() *cobra.Command {
	return &cobra.Command{
		Use:   "refresh [--stack NAME] [--dry-run BOOL] [--pools a,b]",
		Short: "invoke the stack's refresh function now and report what it did (the action's mode: refresh)",
		Long: `refresh invokes the stack's refresh function (terminate expired instances, fill and trim the
warm pools, tidy the offers) and reports what it did. In a workflow it is the action's
mode: refresh, and writes the report output and the step summary. Its inputs come from the
action (INPUT_*), HANGAR_* variables or these flags; hangar refresh -h lists them.`,
		DisableFlagParsing: true,
		Run:                func(_ *cobra.Command, args []string) { refreshMain(args) },
	}
}
