// Command demo runs Hangar's whole lifecycle locally, on the emulators, with no AWS account and no
// GitHub: the real provision and release binaries, as the action runs them, against a simulated
// fleet of real agents and the GitHub stand-in. make demo starts the emulators and runs it.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/internal/testkit/emustack"
	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
	"github.com/hangar-ci/hangar/internal/wire/step"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
	"github.com/hangar-ci/hangar/pkg/refresh"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func say(format string, a ...any) { fmt.Printf("\n==> "+format+"\n", a...) }

// timeline records the demo's steps for the table it ends with.
type timeline struct {
	start time.Time
	rows  [][]string
}

// add records a step that began at begin.
func (tl *timeline) add(step string, begin time.Time, result string) {
	tl.rows = append(tl.rows, []string{strconv.Itoa(len(tl.rows) + 1), step,
		fmt.Sprintf("%.1f", begin.Sub(tl.start).Seconds()), time.Since(begin).Round(time.Millisecond).String(), result})
}

func (tl *timeline) String() string {
	return step.Table([]string{"#", "step", "at (s)", "took", "result"}, tl.rows)
}

func run(ctx context.Context) error {
	say("building the binaries, and deploying the stack into the emulators: synthesized by the CDK app from internal/cmd/demo/hangar.demo.yaml")
	provisionBin, err := testbuild.Build("github.com/hangar-ci/hangar/cmd/provision")
	if err != nil {
		return err
	}
	releaseBin, err := testbuild.Build("github.com/hangar-ci/hangar/cmd/release")
	if err != nil {
		return err
	}
	refreshBin, err := testbuild.Build("github.com/hangar-ci/hangar/cmd/refresh")
	if err != nil {
		return err
	}
	hangarBin, err := testbuild.Build("github.com/hangar-ci/hangar/cmd/hangar")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "hangar-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tl := &timeline{start: time.Now()}
	stack := fmt.Sprintf("hangar-demo-%d", time.Now().Unix()%1e6)
	// The GitHub stand-in is up before the stack: its pool documents pin the GitHub server, here
	// the stand-in's loopback URL, which only the local world's builds (make demo's) accept.
	gh := ghfake.New(localenv.AdminToken)
	defer gh.Close()
	d, err := emustack.NewDeployment(ctx, stack, dir, gh.URL())
	if err != nil {
		return err
	}
	start := time.Now()
	deployed, err := d.Deploy(ctx, emustack.Settings{Idle: pooldoc.DefaultTimeouts.Idle.D()})
	if err != nil {
		return err
	}
	defer func() {
		if err := d.Remove(); err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
		}
	}()
	fmt.Printf("    stack %s: CREATE_COMPLETE in %s; the workflows' role: %s\n", stack, time.Since(start).Round(100*time.Millisecond), deployed.Outputs["WorkflowRoleArn"])
	tl.add("deploy the stack (CDK app → CloudFormation)", start, "CREATE_COMPLETE")
	for _, g := range deployed.Gaps {
		fmt.Printf("    (emulator gap) %s\n", g)
	}

	say("starting the world around it (GitHub stand-in, fleet simulator running a real agent per instance), attached by the stack's name")
	e, err := localenv.Start(ctx, localenv.Options{Stack: stack, Deployed: true, Baked: true, GitHub: gh})
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Printf("    table %s, pool %s (%s), repository %s\n", e.Table, e.Pool, strings.Join(e.Doc.InstanceTypes, ", "), localenv.Repo)
	// The stack's refresh function, run by a local Lambda under the name the stack gives it: the
	// demo refreshes by hand as a workflow does (the action's mode: refresh, Lambda Invoke).
	if _, err := e.ServeRefresh(refreshBin); err != nil {
		return err
	}
	// Label-routed jobs: the stand-in plays the GitHub App, installed on the repository's owner;
	// its webhooks reach the webhook function's handler on a loopback address (the Function URL),
	// and the dispatcher takes the stack's jobs and returns queues as its event source mappings.
	jobs, err := e.ServeJobs(ctx, localenv.JobsOptions{})
	if err != nil {
		return err
	}
	fmt.Printf("    the GitHub App's webhook URL: %s (the stack's %s in AWS)\n", jobs.URL, deployed.Outputs["WebhookUrl"])

	var first []string
	for i, run := range []string{"4001", "4002"} {
		if i == 1 {
			// A run's instances go back under the pool's settings as they were when it took them
			// (their items say so: docs/design.md §2), so the shorter timeout comes before the claim.
			say("redeploying the stack with an idle timeout of 8 s (30 min by default), so that the demo can show expiry")
			if _, err := d.Deploy(ctx, emustack.Settings{Idle: 8 * time.Second}); err != nil {
				return err
			}
		}
		say("workflow run %s: provision 3 runners (%s)", run, map[int]string{0: "the pool is empty: EC2 Fleet creates them", 1: "the pool has them: they are reused"}[i])
		start = time.Now()
		res, err := localenv.RunStep(ctx, provisionBin, e.StepEnv(run, 3, dir), dir)
		if err != nil {
			return err
		}
		fmt.Printf("    provision took %s; outputs: runner-label=%s reused=%s created=%s\n", time.Since(start).Round(time.Millisecond),
			res.Outputs["runner-label"], res.Outputs["reused"], res.Outputs["created"])
		fmt.Print(indent(res.Summary))
		tl.add(map[int]string{0: "cold provision of 3 (run 4001)", 1: "warm provision of 3 (run 4002)"}[i], start,
			fmt.Sprintf("%s created, %s reused", res.Outputs["created"], res.Outputs["reused"]))
		var ids []string
		if err := json.Unmarshal([]byte(res.Outputs["instance-ids"]), &ids); err != nil {
			return fmt.Errorf("instance-ids output %q: %w", res.Outputs["instance-ids"], err)
		}
		if i == 0 {
			first = ids
		} else {
			fmt.Printf("    the same machines as run %s: %v\n", "4001", sameSet(first, ids))
		}

		say("run %s: six jobs with runs-on: %s (and one for another run, which must not land here)", run, run)
		jobsStart := time.Now()
		stray := e.GH.QueueJob(localenv.Repo, []string{"9999"}, "echo stray")
		var jobs []int64
		ok := 0
		for range 6 {
			jobs = append(jobs, e.GH.QueueJob(localenv.Repo, []string{run}, "echo built on $RUNNER_NAME; ls -A | wc -l"))
		}
		for _, j := range jobs {
			done, err := e.GH.WaitJob(ctx, j)
			if err != nil {
				return err
			}
			fmt.Printf("    job %d: %s on %s\n", done.ID, done.Conclusion, done.RunnerName)
			if done.Conclusion == "success" && strings.HasSuffix(done.RunnerName, "-"+run) {
				ok++
			}
		}
		s, _ := e.GH.Job(stray)
		fmt.Printf("    the other run's job is still %s\n", s.Status)
		tl.add("6 jobs of run "+run, jobsStart, fmt.Sprintf("%d succeeded on the run's runners; the other run's job %s", ok, s.Status))

		say("run %s: release (the agents deregister, wipe, and the instances go back to the pool)", run)
		start = time.Now()
		rel, err := localenv.RunStep(ctx, releaseBin, e.StepEnv(run, 0, dir), dir)
		if err != nil {
			return err
		}
		fmt.Printf("    release took %s; runners left on GitHub: %d\n", time.Since(start).Round(time.Millisecond), len(e.GH.Runners("")))
		fmt.Print(indent(rel.Summary))
		tl.add("release (run "+run+")", start, fmt.Sprintf("%d runners left on GitHub", len(e.GH.Runners(""))))
	}

	say("the pool now holds the three idle instances, each with an idle deadline (8 s in this demo, 30 min by default):")
	items, err := e.Store.InPoolState(ctx, e.Pool, state.Idle)
	if err != nil {
		return err
	}
	var last time.Time
	for _, it := range items {
		fmt.Printf("    %s %s idle until %s (served run %s)\n", it.ID, it.InstanceType, it.Threshold.Format(time.RFC3339), it.LastRunID)
		if it.Threshold.After(last) {
			last = it.Threshold
		}
	}
	if err := wait.Sleep(ctx, time.Until(last.Add(time.Second))); err != nil {
		return err
	}
	say("expiry: the deadlines have passed; refresh (the stack's function, invoked as the action's mode: refresh does) terminates them")
	start = time.Now()
	rep, err := runRefresh(ctx, e, hangarBin, dir)
	if err != nil {
		return err
	}
	tl.add("expiry: refresh", start, fmt.Sprintf("%d expired, terminated", rep.Pools[0].Expired))

	say("warm pool: redeployed with a schedule that wants 2 hot instances; refresh launches them in one request")
	start = time.Now()
	if _, err := d.Deploy(ctx, emustack.Settings{Idle: pooldoc.DefaultTimeouts.Idle.D(), Hot: 2}); err != nil {
		return err
	}
	tl.add("redeploy: 2 hot instances wanted", start, "UPDATE_COMPLETE")
	start = time.Now()
	if rep, err = runRefresh(ctx, e, hangarBin, dir); err != nil {
		return err
	}
	tl.add("warm pool: refresh", start, fmt.Sprintf("%d launched", rep.Pools[0].Launched))
	warming, err := e.Store.InPoolState(ctx, e.Pool, state.Created)
	if err != nil {
		return err
	}
	for _, in := range warming {
		if _, err := e.WaitSignal(ctx, in.ID, state.SignalReady, "", 1); err != nil {
			return err
		}
	}
	say("their agents are READY; the next refresh puts them in the pool, ready to be claimed")
	start = time.Now()
	if rep, err = runRefresh(ctx, e, hangarBin, dir); err != nil {
		return err
	}
	tl.add("warm pool: refresh", start, fmt.Sprintf("%d idle, ready to be claimed", rep.Pools[0].Idle))
	if err := labelRouted(ctx, e, jobs, tl); err != nil {
		return err
	}
	say("done: 2 runs and 3 label-routed jobs served, %d runner registrations, nothing left registered on GitHub (%d). The timeline:",
		e.GH.Registrations(), len(e.GH.Runners("")))
	fmt.Print("\n" + tl.String())
	if err := operatorView(ctx, e, hangarBin); err != nil {
		return err
	}
	return showUI(ctx, e, hangarBin)
}

// operatorView shows what an operator sees of the demo's stack with hangar, run with the
// operator's credentials (here the emulators').
func operatorView(ctx context.Context, e *localenv.Env, bin string) error {
	say("the operator's view of stack %s: hangar status, hangar runs, hangar cost (docs/operations.md)", e.Stack)
	for _, args := range [][]string{{"status"}, {"runs", "--since", "1h"}, {"cost", "--by", "repository", "--since", "1h"}, {"cost", "--by", "pool", "--since", "1h"}} {
		cmd := exec.CommandContext(ctx, bin, append(args, "--stack", e.Stack)...)
		cmd.Env = e.Environ()
		out, err := cmd.CombinedOutput()
		fmt.Printf("\n$ hangar %s --stack %s\n%s", strings.Join(args, " "), e.Stack, indent(string(out)))
		if err != nil {
			return fmt.Errorf("hangar %s: %w", strings.Join(args, " "), err)
		}
	}
	return nil
}

// runRefresh runs the action's refresh step (hangar refresh: the stack's function, through
// Lambda Invoke) and prints what it did.
func runRefresh(ctx context.Context, e *localenv.Env, bin, dir string) (*refresh.Report, error) {
	res, err := localenv.RunRefreshStep(ctx, bin, e.StepEnv("4003", 0, dir), dir)
	if err != nil {
		return nil, err
	}
	var rep refresh.Report
	if err := json.Unmarshal([]byte(res.Outputs["report"]), &rep); err != nil {
		return nil, fmt.Errorf("refresh report %q: %w", res.Outputs["report"], err)
	}
	if len(rep.Pools) == 0 {
		return nil, fmt.Errorf("refresh reported no pool: %s", res.Outputs["report"])
	}
	fmt.Print(indent(res.Summary))
	return &rep, nil
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]bool{}
	for _, x := range a {
		seen[x] = true
	}
	for _, x := range b {
		if !seen[x] {
			return false
		}
	}
	return true
}
