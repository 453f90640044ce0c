// Command release is the action's `mode: release` step (package release): it gives the workflow
// run's instances back to their pools once their agents have deregistered the runners. It fails
// only when it cannot act at all; cleanup problems become warnings. Inputs come from the action
// (INPUT_*), HANGAR_* variables or flags; run `release -h` for them.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/sethvargo/go-githubactions"

	"github.com/hangar-ci/hangar/internal/wire/step"
	"github.com/hangar-ci/hangar/pkg/platform/ghclient"
	"github.com/hangar-ci/hangar/pkg/steps/release"
)

// options are the validated inputs.
type options struct {
	cfg           release.Config
	req           release.Request
	token, apiURL string
}

func main() { step.Main("release", os.Args[1:], parse, func(o options) string { return o.token }, run) }

// parse reads and validates every input; it makes no request.
func parse(args []string, gha *githubactions.Action) (options, error) {
	in := step.NewInputs("release", gha)
	in.Declare(step.ReleaseInputs...)
	in.DeclareContext()
	if err := in.Parse(args); err != nil {
		return options{}, err
	}
	ctx := in.Context()
	o := options{token: in.String("github-token"), apiURL: ctx.APIURL,
		cfg: release.Config{DeregisterTimeout: in.Duration("deregister-timeout")},
		req: release.Request{Stack: in.String("stack"), RunID: ctx.RunID, Repository: ctx.Repository, Scope: in.String("runner-scope")}}
	o.cfg.ApplyDefaults()
	o.req.ApplyDefaults()
	errs := in.Err()
	if err := o.req.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.token == "" {
		errs = append(errs, errors.New("github-token: empty: want a GitHub App installation token or a PAT with admin rights on the repository or organisation"))
	}
	return o, errors.Join(errs...)
}

func run(ctx context.Context, o options, gha *githubactions.Action) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "release")
	gha.Group("Release the runners of run " + o.req.RunID)
	defer gha.EndGroup()
	clients, err := step.NewClients(ctx)
	if err != nil {
		return err
	}
	gh, err := ghclient.New(o.apiURL, o.token, o.req.RunnerScope())
	if err != nil {
		return err
	}
	wiring := &step.Wiring{Clients: clients, Stack: o.req.Stack, GitHub: gh, Log: log, Mask: gha.AddMask}
	res, warnings, err := wiring.ReleaseRun(ctx, o.cfg, o.req.RunID)
	for _, w := range warnings {
		gha.Warningf("%v", w)
	}
	if err != nil {
		return err
	}
	for _, w := range res.Warnings {
		gha.Warningf("%s", w)
	}
	if len(res.Instances) == 0 {
		step.Summary(gha, fmt.Sprintf("### Hangar: released run %s\n\nNo instance held run %s: nothing to give back (provision gave back what it took, or never ran). %s · took %s\n",
			o.req.RunID, o.req.RunID, runnersDeleted(res), res.Took.Round(10e6)))
		return nil
	}
	rows := make([][]string, len(res.Instances))
	total, unknown := 0.0, 0
	for i, x := range res.Instances {
		cost := "price unknown"
		if x.PriceKnown {
			cost = fmt.Sprintf("$%.6f", x.Cost)
			total += x.Cost
		} else {
			unknown++
		}
		rows[i] = []string{x.ID, x.Type, x.AZ, x.UsageClass, x.Result, x.Reason, fmt.Sprintf("%.1f", x.Seconds), fmt.Sprintf("%.0f", x.HeldSeconds), cost}
	}
	step.Summary(gha, fmt.Sprintf("### Hangar: released run %s\n\n%s\n%s · %s · took %s\n", o.req.RunID,
		step.Table([]string{"instance", "type", "AZ", "market", "result", "why", "after (s)", "held (s)", "cost"}, rows),
		runCost(total, unknown), runnersDeleted(res), res.Took.Round(10e6)))
	return nil
}

// runCost says what the run's instances cost while it held them.
func runCost(total float64, unknown int) string {
	s := fmt.Sprintf("the run's instances cost $%.6f while it held them", total)
	if unknown > 0 {
		s += fmt.Sprintf(" (%d of them at a price unknown, not counted)", unknown)
	}
	return s
}

// runnersDeleted says which runners release deleted from GitHub.
func runnersDeleted(res *release.Result) string {
	return fmt.Sprintf("%d runners of the run deleted, %d left behind by other runs deleted", res.RunnersDeleted, res.LeftoversDeleted)
}
