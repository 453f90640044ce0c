package secrets

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/lambdaemu"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
)

// world is the local world of the cycle, with recorders in front of the GitHub stand-in's API
// and of the DynamoDB the steps write to.
type world struct {
	*localenv.Env
	ctx context.Context
	dir string

	provisionBin, releaseBin, refreshBin, hangarBin string
	fn                                              *lambdaemu.Emulator

	github *recorder // the steps' GitHub API traffic: the tokens issued
	ddb    *recorder // the steps' DynamoDB traffic: every write to the table

	steps  []stepRun
	writes []exchange          // the steps' DynamoDB requests
	minted map[string]string   // token → kind, every runner token the stand-in issued to a step
	mintBy map[string][]string // step name → the tokens it was issued
	jobs   []string            // the jobs' output
	// snapshots are the instances' files and the state table while runs held the instances.
	snapshots []source
	allIDs    map[string]bool // every instance the cycle used
	started   time.Time
}

// stepRun is one step the cycle ran, and what it left.
type stepRun struct {
	name string
	res  localenv.StepResult
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{
		provisionBin: testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/provision"),
		releaseBin:   testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/release"),
		refreshBin:   testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/refresh"),
		hangarBin:    testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/hangar"),
		dir:          t.TempDir(),
		minted:       map[string]string{},
		mintBy:       map[string][]string{},
		allIDs:       map[string]bool{},
		started:      time.Now(),
	}
	startCtx, cancelStart := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancelStart()
	e, err := localenv.Start(startCtx, localenv.Options{Stack: testbed.Name(t, "secrets"), Baked: true,
		AgentArgs: []string{"--poll-interval", "250ms"}})
	require.NoError(t, err)
	w.Env = e
	t.Cleanup(func() {
		if t.Failed() {
			for _, id := range e.Sim.Running() {
				t.Logf("agent log of %s:\n%s", id, e.Sim.AgentLog(id))
			}
		}
		e.Close()
	})
	// Generous: on a busy machine, with the emulators shared, the whole run can take minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	w.ctx = ctx
	w.fn, err = e.ServeRefresh(w.refreshBin)
	require.NoError(t, err)
	w.github = newRecorder(t, e.GH.URL())
	w.ddb = newRecorder(t, os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"))
	return w
}

// run runs a step for run as the action does, with its GitHub API and DynamoDB traffic through
// the recorders, and keeps what it left and the tokens it was issued.
func (w *world) run(t *testing.T, name, run string, count int) localenv.StepResult {
	t.Helper()
	env := append(w.StepEnv(run, count, w.dir), "GITHUB_API_URL="+w.github.URL(), "AWS_ENDPOINT_URL_DYNAMODB="+w.ddb.URL())
	var (
		res localenv.StepResult
		err error
	)
	switch {
	case strings.HasPrefix(name, "provision"):
		res, err = localenv.RunStep(w.ctx, w.provisionBin, env, w.dir)
	case strings.HasPrefix(name, "release"):
		res, err = localenv.RunStep(w.ctx, w.releaseBin, env, w.dir)
	default:
		res, err = localenv.RunRefreshStep(w.ctx, w.hangarBin, env, w.dir)
	}
	require.NoError(t, err, "%s", name)
	issued := issuedTokens(w.github.Take())
	for tok, kind := range issued {
		w.minted[tok] = kind
		w.mintBy[name] = append(w.mintBy[name], tok)
	}
	w.writes = append(w.writes, w.ddb.Take()...)
	w.steps = append(w.steps, stepRun{name: name, res: res})
	t.Logf("%s: %d tokens issued, outputs %v", name, len(issued), res.Outputs)
	return res
}

// provision runs a provision step for run and returns the instances it gave.
func (w *world) provision(t *testing.T, name, run string, count int) []string {
	t.Helper()
	res := w.run(t, name, run, count)
	var ids []string
	require.NoError(t, json.Unmarshal([]byte(res.Outputs["instance-ids"]), &ids), "%v", res.Outputs)
	require.Len(t, ids, count)
	for _, id := range ids {
		w.allIDs[id] = true
	}
	return ids
}

// runJobs runs n jobs of run through the GitHub stand-in on the run's runners; each prints its
// environment (the runner's, which must hold no token).
func (w *world) runJobs(t *testing.T, run string, n int) {
	t.Helper()
	var ids []int64
	for i := range n {
		ids = append(ids, w.GH.QueueJob(localenv.Repo, []string{run}, fmt.Sprintf("echo job %d of run %s; env; id", i, run)))
	}
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(w.ctx, 2*time.Minute)
		job, err := w.GH.WaitJob(ctx, id)
		cancel()
		require.NoError(t, err)
		require.Equal(t, "success", job.Conclusion, "%s", job.Output)
		w.jobs = append(w.jobs, fmt.Sprintf("job %d on %s:\n%s", job.ID, job.RunnerName, job.Output))
	}
}

// cycle is the full cycle: cold provision, jobs, release, warm provision, jobs, release, refresh.
func (w *world) cycle(t *testing.T) {
	t.Helper()
	const count = 2
	cold := w.provision(t, "provision (cold)", "5101", count)
	w.runJobs(t, "5101", count)
	w.snapshot(t, "while run 5101 held the instances")
	w.run(t, "release 5101", "5101", 0)
	warm := w.provision(t, "provision (warm)", "5102", count)
	require.ElementsMatch(t, cold, warm, "the warm provision reused the instances")
	w.runJobs(t, "5102", count)
	w.snapshot(t, "while run 5102 held the instances")
	w.run(t, "release 5102", "5102", 0)
	w.run(t, "refresh", "5102", 0)
	require.Positive(t, w.fn.Invocations())

	kinds := map[string]int{}
	for _, k := range w.minted {
		kinds[k]++
	}
	require.GreaterOrEqual(t, kinds["registration"], 2, "a registration token per provision")
	require.Zero(t, kinds["remove"], "release mints no remove token: none can reach an instance")
	t.Logf("cycle done in %s: instances %v, tokens issued %v", time.Since(w.started).Round(time.Millisecond),
		slices.Sorted(maps.Keys(w.allIDs)), kinds)
}

// tokens returns every token the cycle used (token → kind).
func (w *world) tokens() map[string]string {
	out := maps.Clone(w.minted)
	out[localenv.AdminToken] = "admin"
	return out
}

// masked checks that each step announced every token it held as a secret (a mask command), so
// that the runner would mask it in the step's log.
func (w *world) masked(t *testing.T) {
	t.Helper()
	for _, s := range w.steps {
		held := w.mintBy[s.name]
		if s.name != "refresh" {
			held = append(held, localenv.AdminToken)
		}
		for _, tok := range held {
			require.Contains(t, s.res.Log, maskCommand+tok+"\n", "%s masks %s", s.name, redact(tok, w.tokens()))
		}
	}
}
