package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hangar-ci/hangar/pkg/operator"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailed   = 1
	exitBadInput = 2
)

// errBadInput marks errors of the operator's input: exit 2.
var errBadInput = operator.ErrBadInput

// globals are the flags every command takes.
type globals struct {
	stack  string
	output string
}

// Output formats.
const (
	outputTable = "table"
	outputJSON  = "json"
)

func (g *globals) validate() error {
	if g.output != outputTable && g.output != outputJSON {
		return fmt.Errorf("%w: --output %q: want table or json", errBadInput, g.output)
	}
	if g.stack == "" {
		return fmt.Errorf("%w: --stack is empty: want the stack's name (the CDK app's stack:, hangar by default)", errBadInput)
	}
	return nil
}

// execute runs the command args name and returns the exit code.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "hangar: %v\n", err)
	if errors.Is(err, errBadInput) || isUsage(err) {
		return exitBadInput
	}
	return exitFailed
}

// usageError is a flag or argument cobra refused.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func isUsage(err error) bool {
	var u usageError
	return errors.As(err, &u) || strings.HasPrefix(err.Error(), "unknown command") ||
		strings.HasPrefix(err.Error(), "unknown flag") || strings.HasPrefix(err.Error(), "unknown shorthand flag")
}

// newRoot builds the command tree.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "hangar",
		Short: "Hangar's command line: the operator's view of a stack, and the action's refresh step",
		Long: `hangar reads a deployed Hangar stack with your own AWS credentials (the standard chain:
AWS_PROFILE, AWS_ACCESS_KEY_ID, SSO; AWS_REGION names the region) and shows what its pools and
instances are doing. It needs no server and no other login. Reads go through the state table's
indexes and the pools' queues; nothing is scanned.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	stack := os.Getenv("HANGAR_STACK")
	if stack == "" {
		stack = "hangar"
	}
	root.PersistentFlags().StringVar(&g.stack, "stack", stack, "the stack's name (taken from $HANGAR_STACK when set)")
	root.PersistentFlags().StringVarP(&g.output, "output", "o", outputTable, "output format: table or json")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outputTable, outputJSON}, cobra.ShellCompDirectiveNoFileComp))
	root.AddCommand(newStatus(g), newRuns(g), newInstance(g), newCost(g), newDrain(g, true), newDrain(g, false), newUI(g), newRefresh(), newSetup(g), newDoctor(g))
	return root
}

// exactArgs is cobra.ExactArgs whose refusal is a usage error naming what is wanted.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("%s takes %s: got %d arguments (%s --help)", cmd.CommandPath(), what, len(args), cmd.CommandPath())}
		}
		return nil
	}
}
