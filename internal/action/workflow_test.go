package action_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// actBinary returns the act CLI: $HANGAR_ACT (make test builds it), or else built here from
// tools/act into .cache/tools/bin.
func actBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("HANGAR_ACT"); p != "" {
		return p
	}
	out := filepath.Join(root, ".cache", "tools", "bin", "act")
	cmd := exec.Command("go", "build", "-o", out, "github.com/nektos/act")
	cmd.Dir = filepath.Join(root, "tools", "act")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "build act: %s", b)
	return out
}

// actLog is what act reported of a workflow run (its --json log).
type actLog struct {
	Exit      int
	Outputs   map[string]map[string]string // job id → step output name → value
	Summaries map[string][]string          // job id → step summaries
	Results   map[string]string            // job id → success, failure
	Text      string
}

func parseActLog(b []byte, exit int) actLog {
	l := actLog{Exit: exit, Outputs: map[string]map[string]string{}, Summaries: map[string][]string{}, Results: map[string]string{}}
	var text strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e struct {
			JobID, Msg, Command, Name, Arg, Content, JobResult string
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			text.WriteString(sc.Text() + "\n")
			continue
		}
		text.WriteString(e.JobID + ": " + strings.TrimRight(e.Msg, "\n") + "\n")
		switch {
		case e.Command == "set-output":
			if l.Outputs[e.JobID] == nil {
				l.Outputs[e.JobID] = map[string]string{}
			}
			l.Outputs[e.JobID][e.Name] = e.Arg
		case e.Command == "summary":
			l.Summaries[e.JobID] = append(l.Summaries[e.JobID], e.Content)
		case e.JobResult != "":
			l.Results[e.JobID] = e.JobResult
		}
	}
	l.Text = text.String()
	return l
}

// workflowRunner runs the repository's example workflows with act on this host (act's host mode:
// -P ubuntu-latest=-self-hosted) against the local world: the action used as uses: ./ (built from
// this source), GitHub's URLs pointing at the https stand-in, and aws-actions/configure-aws-
// credentials replaced by a stand-in that checks its inputs (the emulators need no role).
type workflowRunner struct {
	t        *testing.T
	act, dir string
	e        *localenv.Env
	cache    string
}

func newWorkflowRunner(t *testing.T, e *localenv.Env) *workflowRunner {
	w := &workflowRunner{t: t, act: actBinary(t), dir: t.TempDir(), e: e, cache: t.TempDir()}
	cred := filepath.Join(w.dir, "configure-aws-credentials")
	require.NoError(t, os.MkdirAll(cred, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(cred, "action.yml"), []byte(`name: configure-aws-credentials stand-in
description: the emulators take the environment's credentials; this checks the inputs a real role needs
inputs:
  role-to-assume: {required: true}
  aws-region: {required: true}
runs:
  using: composite
  steps:
    - shell: bash
      env: {ROLE: "${{ inputs.role-to-assume }}", REGION: "${{ inputs.aws-region }}"}
      run: |
        [[ "$ROLE" == arn:aws:iam::*:role/* ]] || { echo "::error::role-to-assume: $ROLE"; exit 1; }
        [ -n "$REGION" ] || { echo "::error::aws-region is empty"; exit 1; }
        echo "AWS_REGION=$REGION" >> "$GITHUB_ENV"
`), 0o644))
	return w
}

// workflow writes an example workflow as this repository would hold it to use its own checkout
// of the action: uses: ./ instead of the published hangar-ci/hangar@v1, after actions/checkout
// (a local action is read from the checked-out workspace, on GitHub as in act). Nothing else
// changes.
func (w *workflowRunner) workflow(name string) string {
	b, err := os.ReadFile(filepath.Join(root, "examples", name))
	require.NoError(w.t, err)
	require.Contains(w.t, string(b), "uses: hangar-ci/hangar@v1")
	b = bytes.ReplaceAll(b, []byte("uses: hangar-ci/hangar@v1"), []byte("uses: ./"))
	b = bytes.ReplaceAll(b, []byte("    steps:\n"), []byte("    steps:\n      - uses: actions/checkout@v4\n"))
	p := filepath.Join(w.dir, name)
	require.NoError(w.t, os.WriteFile(p, b, 0o644))
	return p
}

// start starts act on workflow for run id run; wait with the returned function. exited is
// closed when act exits.
func (w *workflowRunner) start(ctx context.Context, workflow, run string, extra ...string) (wait func() actLog, exited <-chan struct{}) {
	args := append([]string{"workflow_dispatch", "-W", workflow, "-C", root, "--json",
		"-P", "ubuntu-latest=-self-hosted", "--action-cache-path", w.cache,
		"--local-repository", "aws-actions/configure-aws-credentials@v4=" + filepath.Join(w.dir, "configure-aws-credentials"),
		"--env", "GITHUB_RUN_ID=" + run, "--env", "GITHUB_REPOSITORY=" + localenv.Repo,
		"--env", "GITHUB_SERVER_URL=" + w.e.GH.URL(), "--env", "GITHUB_API_URL=" + w.e.GH.URL(),
		"-s", "HANGAR_GITHUB_TOKEN=" + localenv.AdminToken,
		"--var", "HANGAR_ROLE_ARN=arn:aws:iam::" + localenv.Account + ":role/" + w.e.Stack + "-workflow",
		"--var", "AWS_REGION=us-east-1", "--var", "HANGAR_STACK=" + w.e.Stack}, extra...)
	cmd := exec.CommandContext(ctx, w.act, args...)
	var env []string
	for _, kv := range w.e.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "GITHUB_") && !strings.HasPrefix(k, "RUNNER_") &&
			!strings.HasPrefix(k, "INPUT_") && !strings.HasPrefix(k, "HANGAR_") && !strings.HasPrefix(k, "ACTIONS_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	var out testbed.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(w.t, cmd.Start())
	done := make(chan struct{})
	var err error
	go func() { err = cmd.Wait(); close(done) }()
	return func() actLog {
		<-done
		exit := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			exit = ee.ExitCode()
		} else {
			require.NoError(w.t, err)
		}
		return parseActLog([]byte(out.String()), exit)
	}, done
}

// matrix reads the shards of the example's test job.
func matrix(t *testing.T) []int {
	b, err := os.ReadFile(filepath.Join(root, "examples", "workflow.yml"))
	require.NoError(t, err)
	i := bytes.Index(b, []byte("shard: ["))
	require.Positive(t, i)
	line := string(b[i+len("shard: [") : i+bytes.IndexByte(b[i:], ']')])
	var shards []int
	for _, f := range strings.Split(line, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		require.NoError(t, err)
		shards = append(shards, n)
	}
	return shards
}

// playGitHub plays what GitHub does for the matrix job that act cannot run (its runs-on is this
// run's self-hosted label): once the run's runners are online it queues one job per shard for
// that label, and waits until every job has run. It returns which runner ran each job. Until
// it is done, the release step is held at its first GitHub request (GitHub starts the release
// job only when the matrix is done: needs).
func playGitHub(ctx context.Context, e *localenv.Env, run string, shards []int) (map[int64]string, []string, error) {
	var runners []string
	err := localenv.Eventually(ctx, 8*time.Minute, "run "+run+"'s 3 runners online", func(context.Context) (bool, error) {
		runners = runners[:0]
		for _, r := range e.GH.Runners(localenv.Repo) {
			if slices.Contains(r.Labels, run) && r.Status == "online" {
				runners = append(runners, r.Name)
			}
		}
		return len(runners) == 3, nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("%w (have %v)", err, runners)
	}
	ranOn := map[int64]string{}
	var ids []int64
	for _, s := range shards {
		ids = append(ids, e.GH.QueueJob(localenv.Repo, []string{run}, fmt.Sprintf("echo make test SHARD=%d", s)))
	}
	for _, id := range ids {
		j, err := e.GH.WaitJob(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		if j.Conclusion != "success" {
			return nil, nil, fmt.Errorf("job %d: %s: %s", id, j.Conclusion, j.Output)
		}
		ranOn[id] = j.RunnerName
	}
	return ranOn, runners, nil
}

// TestExampleWorkflow runs examples/workflow.yml with act, twice: each run provisions 3
// runners, the 6 matrix jobs run on them (and on no other runner), and release gives them back;
// the second run reuses the first run's instances. Then examples/refresh.yml reports the warm
// pool through the action's refresh mode. Then a run whose provision is cancelled mid-way:
// release, run because of if: always(), leaves nothing behind.
func TestExampleWorkflow(t *testing.T) {
	testbed.Require(t)
	refreshBin := testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/refresh")
	startCtx, cancelStart := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancelStart()
	e, err := localenv.Start(startCtx, localenv.Options{Stack: testbed.Name(t, "act"), Baked: true, TLS: true})
	require.NoError(t, err)
	defer e.Close()
	fn, err := e.ServeRefresh(refreshBin)
	require.NoError(t, err)
	w := newWorkflowRunner(t, e)
	ci := w.workflow("workflow.yml")
	shards := matrix(t)
	require.Len(t, shards, 6)
	// The first run builds the steps from source (uses: ./ has no release binaries): minutes on a
	// cold build cache.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	var first []string
	for i, run := range []string{"81001", "81002"} {
		// The steps' runner listings wait while the test plays GitHub: provision's housekeeping
		// (provision returns only once it is done) and so release, which lists first.
		held := e.GH.Hold("/actions/runners")
		done, exited := w.start(ctx, ci, run)
		playCtx, stopPlaying := context.WithCancel(ctx)
		go func() { <-exited; stopPlaying() }() // provision failed: nothing to play
		ranOn, runners, playErr := playGitHub(playCtx, e, run, shards)
		stopPlaying()
		held()
		l := done()
		require.NoError(t, playErr, "%s", l.Text)
		require.Equal(t, 0, l.Exit, "%s", l.Text)
		require.Equal(t, "success", l.Results["runners"], "%s", l.Text)
		require.Equal(t, "success", l.Results["release"], "%s", l.Text)
		require.NotContains(t, l.Results, "test", "act cannot run the self-hosted matrix: the test played GitHub for it")

		out := l.Outputs["runners"]
		t.Logf("run %s: outputs %v; jobs ran on %v", run, out, ranOn)
		require.Equal(t, run, out["runner-label"])
		var ids []string
		require.NoError(t, json.Unmarshal([]byte(out["instance-ids"]), &ids))
		require.Len(t, ids, 3)
		if i == 0 {
			require.Equal(t, map[string]string{"created": "3", "reused": "0"}, map[string]string{"created": out["created"], "reused": out["reused"]})
			first = ids
		} else {
			require.Equal(t, "3", out["reused"], "the second run reuses the first run's instances")
			require.Equal(t, "0", out["created"])
			require.ElementsMatch(t, first, ids)
		}
		for id, name := range ranOn {
			require.Contains(t, runners, name, "job %d ran on %s, not one of run %s's runners", id, name, run)
		}
		require.Len(t, ranOn, 6)

		prov := strings.Join(l.Summaries["runners"], "\n")
		require.Contains(t, prov, "### Hangar: 3 runners for run "+run)
		require.Contains(t, prov, "| instance | type | AZ | market | source | ready after (s) |")
		require.Contains(t, prov, "| claim | create | wait for runners | total |")
		rel := strings.Join(l.Summaries["release"], "\n")
		require.Contains(t, rel, "### Hangar: released run "+run)
		for _, id := range ids {
			require.Contains(t, prov, "| "+id+" |")
			require.Contains(t, rel, "| "+id+" |")
			it, err := e.Store.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, state.Idle, it.State, "%s after release", id)
		}
		require.Empty(t, e.GH.Runners(""), "release deregistered every runner")
	}

	// Refresh by hand: the dry run reports the three idle instances.
	refresh, _ := w.start(ctx, w.workflow("refresh.yml"), "81003", "--input", "dry-run=true")
	l := refresh()
	require.Equal(t, 0, l.Exit, "%s\n%s", l.Text, fn.Logs())
	var rep struct {
		DryRun bool
		Pools  []struct {
			Pool string
			Idle int
		}
	}
	require.NoError(t, json.Unmarshal([]byte(l.Outputs["refresh"]["report"]), &rep), "%s", l.Text)
	require.True(t, rep.DryRun)
	require.Len(t, rep.Pools, 1)
	require.Equal(t, 3, rep.Pools[0].Idle)
	require.Contains(t, strings.Join(l.Summaries["refresh"], "\n"), "### Hangar: refresh of stack "+e.Stack+" (dry run")
	require.Equal(t, 1, fn.Invocations())

	cancelled(ctx, t, w, ci, "81004")
}

// cancelled runs the example with provision cancelled mid-way, as a cancelled workflow does (the
// runner signals the step): the agents are held at their runner registration so that provision
// is caught with its instances claimed; then release (if: always()) runs, and nothing is left:
// no runner, no instance holding the run, every instance idle and offered once, or terminated.
func cancelled(ctx context.Context, t *testing.T, w *workflowRunner, ci, run string) {
	e := w.e
	held := e.GH.Hold("/_fake/register")
	defer held()
	done, _ := w.start(ctx, ci, run)
	err := localenv.Eventually(ctx, 8*time.Minute, "provision claims", func(ctx context.Context) (bool, error) {
		claimed, err := e.Store.ByRun(ctx, run)
		return len(claimed) > 0, err
	})
	require.NoError(t, err, "provision claimed nothing")
	pid := stepProcess(t, "hangar-provision-")
	require.NoError(t, syscall.Kill(pid, syscall.SIGINT))
	held()
	l := done()
	require.NotEqual(t, 0, l.Exit, "%s", l.Text)
	t.Logf("cancelled run %s: act exit %d, jobs %v; summaries:\n%s\n%s", run, l.Exit, l.Results, l.Summaries["runners"], l.Summaries["release"])
	require.Equal(t, "failure", l.Results["runners"], "%s", l.Text)
	require.Equal(t, "success", l.Results["release"], "release runs after a cancelled provision: %s", l.Text)
	require.Contains(t, strings.Join(l.Summaries["runners"], "\n"), "### Hangar: provision for run "+run+" failed")
	require.Contains(t, strings.Join(l.Summaries["release"], "\n"), "### Hangar: released run "+run)

	err = localenv.Eventually(ctx, 5*time.Minute, "nothing held by run "+run, func(ctx context.Context) (bool, error) {
		holding, err := e.Store.ByRun(ctx, run)
		return len(holding) == 0 && len(e.GH.Runners("")) == 0, err
	})
	require.NoError(t, err, "run %s still holds instances or runners: %v", run, e.GH.Runners(""))
	idle, err := e.Store.InPoolState(ctx, e.Pool, state.Idle)
	require.NoError(t, err)
	offered, err := e.Offered(ctx)
	require.NoError(t, err)
	want := map[string]int{}
	for _, it := range idle {
		want[it.ID] = 1
	}
	require.Equal(t, want, offered, "every idle instance offered once, and nothing else")
	for _, st := range []state.State{state.Claimed, state.Running, state.Created} {
		left, err := e.Store.InPoolState(ctx, e.Pool, st)
		require.NoError(t, err)
		require.Empty(t, left, "instances left %s", st)
	}
	leaked, err := e.Leaked(ctx)
	require.NoError(t, err)
	require.Empty(t, leaked, "every running EC2 instance has a live item")
}

// stepProcess finds the running step binary whose name starts with prefix (the action builds it
// into RUNNER_TEMP as hangar-<mode>-<pid>).
func stepProcess(t *testing.T, prefix string) int {
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	require.NoError(t, err)
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		argv0, _, _ := bytes.Cut(b, []byte{0})
		if strings.HasPrefix(filepath.Base(string(argv0)), prefix) {
			pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			require.NoError(t, err)
			return pid
		}
	}
	t.Fatalf("no running %s* process", prefix)
	return 0
}
