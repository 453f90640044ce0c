package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/sethvargo/go-githubactions"

	"github.com/hangar-ci/hangar/internal/wire/step"
	"github.com/hangar-ci/hangar/pkg/refresh"
)

// refreshMain is `hangar refresh`, the action's mode: refresh.
func refreshMain(args []string) {
	step.Main("refresh", args, parseInvoke, func(invokeOptions) string { return "" }, runInvoke)
}

// invokeOptions are the refresh step's validated inputs.
type invokeOptions struct {
	inv refresh.Invocation
}

// parseInvoke reads and validates the refresh step's inputs; it makes no request.
func parseInvoke(args []string, gha *githubactions.Action) (invokeOptions, error) {
	in := step.NewInputs("hangar refresh", gha)
	in.Declare(step.RefreshInputs...)
	if err := in.Parse(args); err != nil {
		return invokeOptions{}, err
	}
	o := invokeOptions{inv: refresh.Invocation{Stack: in.String(step.InStack.Name), Request: refresh.Request{
		DryRun: in.Bool(step.InDryRun.Name), Pools: step.ParseList(in.String(step.InPools.Name))}}}
	o.inv.ApplyDefaults()
	errs := in.Err()
	if err := o.inv.Validate(); err != nil {
		errs = append(errs, err)
	}
	return o, errors.Join(errs...)
}

// runInvoke invokes the stack's refresh function and reports what it did.
func runInvoke(ctx context.Context, o invokeOptions, gha *githubactions.Action) error {
	what := "Refresh stack " + o.inv.Stack
	if o.inv.DryRun {
		what += " (dry run)"
	}
	gha.Group(what)
	defer gha.EndGroup()
	clients, err := step.NewClients(ctx)
	if err != nil {
		return err
	}
	rep, err := refresh.Invoke(ctx, lambda.NewFromConfig(clients.AWS), o.inv)
	if err != nil {
		return err
	}
	for _, e := range rep.Errors {
		gha.Warningf("refresh: %s", e)
	}
	b, _ := json.Marshal(rep)
	step.Output(gha, "report", string(b))
	step.Summary(gha, summary(rep))
	return nil
}

// summary renders a refresh report: a row per pool, then each action and why.
func summary(rep *refresh.Report) string {
	var b strings.Builder
	title := "### Hangar: refresh of stack " + rep.Stack
	if rep.DryRun {
		title += " (dry run: nothing changed; the actions are what it would do)"
	}
	b.WriteString(title + "\n\n")
	rows := make([][]string, len(rep.Pools))
	for i, p := range rep.Pools {
		rows[i] = []string{p.Pool, strconv.Itoa(p.Idle), strconv.Itoa(p.Warming), strconv.Itoa(p.Stopped), strconv.Itoa(p.Depth),
			strconv.Itoa(p.Expired), strconv.Itoa(p.Launched), strconv.Itoa(p.Stops),
			fmt.Sprintf("%d hot, %d stopped", p.Target.Hot, p.Target.Stopped), strconv.Itoa(p.ItemsRead), strings.Join(p.Errors, "; ")}
	}
	b.WriteString(step.Table([]string{"pool", "idle", "warming", "stopped", "offers", "expired", "launched", "stopped now", "target", "items read", "errors"}, rows))
	if len(rep.Actions) > 0 {
		rows = make([][]string, len(rep.Actions))
		for i, a := range rep.Actions {
			rows[i] = []string{a.Do, a.Instance, a.Pool, a.Reason}
		}
		b.WriteString("\n" + step.Table([]string{"action", "instance", "pool", "why"}, rows))
	} else {
		b.WriteString("\nNothing to do.\n")
	}
	fmt.Fprintf(&b, "\n%d orphans · took %d ms\n", rep.Orphans, rep.TookMs)
	for _, e := range rep.Errors {
		b.WriteString("\n> " + e + "\n")
	}
	return b.String()
}
