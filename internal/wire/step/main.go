package step

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"github.com/sethvargo/go-githubactions"
)

// Main is a step's main: parse and validate every input from args (the command line after the
// program's name) and the environment (exit 2 on bad input, before any request), mask the secret,
// run (exit 1 on failure). Errors become workflow error annotations.
func Main[O any](name string, args []string, parse func([]string, *githubactions.Action) (O, error), secret func(O) string,
	run func(context.Context, O, *githubactions.Action) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	gha := githubactions.New()
	opts, err := parse(args, gha)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		gha.Errorf("%s: %v", name, err)
		os.Exit(2)
	}
	if s := secret(opts); s != "" {
		gha.AddMask(s)
	}
	if err := run(ctx, opts, gha); err != nil {
		gha.Errorf("%s: %v", name, err)
		stop()
		os.Exit(1)
	}
}
