// Command provision is the action's `mode: provision` step (package provision): it gives the
// workflow run the instances it asks for and returns once every runner is registered with the
// run's label. Inputs come from the action (INPUT_*), HANGAR_* variables or flags; run
// `provision -h` for them. Outputs: runner-label, instance-ids (JSON), reused, created.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sethvargo/go-githubactions"

	"github.com/hangar-ci/hangar/internal/wire/step"
	"github.com/hangar-ci/hangar/pkg/platform/ghclient"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
)

func main() {
	step.Main("provision", os.Args[1:], parse, func(o options) string { return o.token }, run)
}

// options are the validated inputs.
type options struct {
	cfg           provision.Config
	token, apiURL string
}

// parse reads and validates every input; it makes no request.
func parse(args []string, gha *githubactions.Action) (options, error) {
	in := step.NewInputs("provision", gha)
	in.Declare(step.ProvisionInputs...)
	in.DeclareContext()
	if err := in.Parse(args); err != nil {
		return options{}, err
	}
	ctx := in.Context()
	tags, tagErr := step.ParseTags(in.String("tags"))
	cfg := provision.Config{
		Stack: in.String("stack"), Pool: in.String("pool"), Count: in.Int("instance-count", "a whole number from 1 to 100"),
		UsageClass: in.String("usage-class"), InstanceTypes: step.ParseList(in.String("allowed-instance-types")),
		MinVCPU: in.Int("min-vcpu", "a whole number"), MinMemoryMiB: in.Int("min-memory-mib", "a whole number of MiB"),
		MaxRuntime: in.Duration("max-runtime"), RegistrationTimeout: in.Duration("registration-timeout"),
		WaitForCapacity: in.Bool("wait-for-capacity"),
		Scope:           in.String("runner-scope"), RunnerGroup: in.String("runner-group"), Labels: step.ParseList(in.String("labels")), Tags: tags,
		RunID: ctx.RunID, RunAttempt: ctx.RunAttempt, Repository: ctx.Repository, ServerURL: ctx.ServerURL,
	}
	cfg.ApplyDefaults()
	errs := in.Err()
	if tagErr != nil {
		errs = append(errs, tagErr)
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	token := in.String("github-token")
	if token == "" {
		errs = append(errs, errors.New("github-token: empty: want a GitHub App installation token or a PAT with admin rights on the repository or organisation"))
	}
	return options{cfg: cfg, token: token, apiURL: ctx.APIURL}, errors.Join(errs...)
}

func run(ctx context.Context, opts options, gha *githubactions.Action) error {
	cfg := opts.cfg
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "provision")
	gha.Group("Provision " + strconv.Itoa(cfg.Count) + " from pool " + cfg.Pool)
	defer gha.EndGroup()
	clients, err := step.NewClients(ctx)
	if err != nil {
		return err
	}
	gh, err := ghclient.New(opts.apiURL, opts.token, cfg.RunnerScope())
	if err != nil {
		return err
	}
	wiring := &step.Wiring{Clients: clients, Stack: cfg.Stack, GitHub: gh, Log: log, Mask: gha.AddMask}
	deps, err := wiring.Provision(ctx, cfg.Pool)
	if err != nil {
		return err
	}
	// The pool decides whether the agents' log tails (a pre-runner script's output among them) may
	// reach this repository's step summary.
	showLogs := deps.Doc.Runner.ShowsLogTo(step.RepositoryVisibility(gha))
	res, err := provision.Run(ctx, cfg, deps)
	if err != nil {
		var failed *provision.Error
		if errors.As(err, &failed) {
			for _, w := range failed.Warnings {
				gha.Warningf("%s", w)
			}
			step.Summary(gha, fmt.Sprintf("### Hangar: provision for run %s failed\n\n%s\n\nWhat it took was given back to the pool or terminated.\n\n%s",
				cfg.RunID, err, failures(failed.Failures, showLogs)))
		}
		return err
	}
	for _, w := range res.Warnings {
		gha.Warningf("%s", w)
	}
	ids := make([]string, len(res.Instances))
	rows := make([][]string, len(res.Instances))
	for i, x := range res.Instances {
		ids[i] = x.ID
		how := "created"
		if x.Reused {
			how = "reused"
		}
		rows[i] = []string{x.ID, x.Type, x.AZ, x.UsageClass, how, fmt.Sprintf("%.1f", x.Ready.Seconds())}
	}
	idsJSON, _ := json.Marshal(ids)
	step.Output(gha, "runner-label", res.RunnerLabel)
	step.Output(gha, "instance-ids", string(idsJSON))
	step.Output(gha, "reused", strconv.Itoa(res.Reused))
	step.Output(gha, "created", strconv.Itoa(res.Created))
	t := res.Timing
	step.Summary(gha, fmt.Sprintf("### Hangar: %d runners for run %s\n\nJobs target them with `runs-on: %s`.\n\n%s\n| claim | create | wait for runners | total |\n|---|---|---|---|\n| %s | %s | %s | %s |\n\n%d reused, %d created, %d replaced.\n\n%s",
		len(res.Instances), res.RunnerLabel, res.RunnerLabel,
		step.Table([]string{"instance", "type", "AZ", "market", "source", "ready after (s)"}, rows),
		round(t.Claim), round(t.Create), round(t.Wait), round(t.Total), res.Reused, res.Created, res.Replaced,
		failures(res.Failures, showLogs)))
	return nil
}

// failures renders the instances given up on, with each agent's log tail in a collapsed block
// when showLogs (the pool's runner.logInSummary for this repository), else a line saying where
// the logs are.
func failures(fs []provision.Failure, showLogs bool) string {
	if len(fs) == 0 {
		return ""
	}
	rows := make([][]string, len(fs))
	var logs strings.Builder
	withheld := false
	for i, f := range fs {
		rows[i] = []string{f.ID, f.Reason}
		switch {
		case f.Log == "":
		case showLogs:
			logs.WriteString(step.Details(f.ID+": the agent's log tail", f.Log))
		default:
			withheld = true
		}
	}
	if withheld {
		logs.WriteString("The agents' log tails are not shown: the pool's `runner.logInSummary` keeps them out of the summaries of public repositories. " +
			"They are in each instance's item (`sigLog`) and the agent's log on the instance.\n\n")
	}
	return "#### Instances given up on\n\n" + step.Table([]string{"instance", "why"}, rows) + "\n" + logs.String()
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
