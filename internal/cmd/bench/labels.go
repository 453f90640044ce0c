package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

func init() { register("labels", benchLabels) }

// Targets of label-routed jobs (docs/benchmarks.md).
const (
	// jobStartTarget: a job's webhook received → its just-in-time runner started on a warm
	// instance, in the local world.
	jobStartTarget = 500 * time.Millisecond
	// handlerTarget: the webhook handler's own time, p99.
	handlerTarget = 50 * time.Millisecond
	// jobAWSTarget and jobGitHubTarget: the control plane's requests for one job, from its queued
	// webhook to its instance offered again (all three webhooks, the dispatcher's placement,
	// check and return).
	jobAWSTarget    = 24
	jobGitHubTarget = 2
	// labelsWarm is how many warm instances the rounds draw from.
	labelsWarm = 4
)

var benchLabelsRepo = localenv.Repo

// benchLabels measures label-routed jobs on a warm pool, one job at a time: from the queued
// webhook's delivery to the runner started (the agent's REGISTERED), the webhook handler's time,
// and what the control plane asks of AWS and GitHub per job.
func benchLabels(ctx context.Context, cfg benchConfig) ([]Row, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	e, err := localenv.Start(ctx, localenv.Options{Stack: fmt.Sprintf("bench-labels-%d", time.Now().Unix()%1e6), Baked: true})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	// The check fires a second after placement so that it is counted with its job.
	j, err := serveWarm(ctx, e, localenv.JobsOptions{CheckAfter: time.Second}, labelsWarm, 800000)
	if err != nil {
		return nil, err
	}

	var starts []time.Duration
	j.Moto.Take()
	j.DDB.Take()
	j.GitHub.Take()
	handled := len(j.HandlerTimes())
	for i := range cfg.rounds {
		job := j.QueueJob(benchLabelsRepo, int64(810000+i), labels, "true")
		if err := waitJobs(ctx, e, []int64{job}); err != nil {
			return nil, err
		}
		start, err := jobStart(ctx, e, job)
		if err != nil {
			return nil, err
		}
		starts = append(starts, start)
		// The job is done when its instance is offered again and its check has fired.
		if err := waitSettled(ctx, e, labelsWarm); err != nil {
			return nil, err
		}
		if err := localenv.Eventually(ctx, time.Minute, "the job's check handled", func(ctx context.Context) (bool, error) {
			return j.Pending(ctx) == 0, nil
		}); err != nil {
			return nil, err
		}
	}
	aws := j.Moto.Take()
	for k, v := range j.DDB.Take() {
		aws[k] += v
	}
	gh := j.GitHub.Take()
	perJob := func(ops map[string]int) float64 {
		n := 0
		for _, v := range ops {
			n += v
		}
		return float64(n) / float64(cfg.rounds)
	}
	handler := j.HandlerTimes()[handled:]
	if os.Getenv("HANGAR_BENCH_LOG") != "" {
		fmt.Fprintln(os.Stderr, "handler times:", handler)
	}
	p99 := percentile(handler, 99)
	rows := []Row{
		timed("label-routed job: webhook → runner started, warm instance", starts, jobStartTarget, false).
			note("from the stand-in's queued delivery to the agent's REGISTERED: webhook, jobs queue, claim, just-in-time runner, its hand-over through the doorbell, agent"),
		row("label-routed job: webhook handler's own time, p99", "s", p99.Seconds(), handlerTarget.Seconds(), "p99 ≤ "+secs(handlerTarget)).
			note(fmt.Sprintf("%d deliveries (queued, in_progress, completed); p50 %s", len(handler), secs(percentile(handler, 50)))),
		row("label-routed job: AWS requests of the control plane", "requests", perJob(aws), jobAWSTarget, fmt.Sprintf("≤ %d", jobAWSTarget)).
			note("per job, webhook and dispatcher: " + breakdown(aws, cfg.rounds)),
		row("label-routed job: GitHub API requests", "requests", perJob(gh), jobGitHubTarget, fmt.Sprintf("≤ %d", jobGitHubTarget)).
			note("per job: " + breakdown(gh, cfg.rounds)),
	}
	return rows, nil
}

// labels are the labels of the benchmarks' label-routed jobs: they name the local world's pool.
var labels = []string{"self-hosted", "hangar", "linux-x64"}

// serveWarm serves label-routed jobs in e with jo (logging to stderr when HANGAR_BENCH_LOG is
// set), and warms the pool: n jobs (runs from run) on the empty pool create its instances, which
// come back idle, wiped and offered.
func serveWarm(ctx context.Context, e *localenv.Env, jo localenv.JobsOptions, n int, run int64) (*localenv.Jobs, error) {
	if os.Getenv("HANGAR_BENCH_LOG") != "" {
		jo.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	j, err := e.ServeJobs(ctx, jo)
	if err != nil {
		return nil, err
	}
	// Under a cap, a job that finds another creation under way waits for room, and may then be
	// handed an instance back rather than a new one: the warm jobs last until all are placed.
	command := "true"
	if jo.MaxInstances > 0 {
		command = "sleep 10"
	}
	var warm []int64
	for i := range n {
		warm = append(warm, j.QueueJob(benchLabelsRepo, run+int64(i), labels, command))
	}
	if err := waitJobs(ctx, e, warm); err != nil {
		return nil, err
	}
	return j, waitSettled(ctx, e, n)
}

// waitJobs waits three minutes at most for jobs to complete successfully.
func waitJobs(ctx context.Context, e *localenv.Env, jobs []int64) error {
	return waitJobsWithin(ctx, e, jobs, 3*time.Minute)
}

// waitSettled waits until n instances are idle, wiped, and offered (none busy); when they are not
// in time, the error says what the pool held last.
func waitSettled(ctx context.Context, e *localenv.Env, n int) error {
	var last []string
	err := localenv.Eventually(ctx, 2*time.Minute, fmt.Sprintf("%d idle instances", n), func(ctx context.Context) (bool, error) {
		last = last[:0]
		ok := true
		for _, st := range []state.State{state.Idle, state.Claimed, state.Running, state.Created} {
			items, err := e.Store.InPoolState(ctx, e.Pool, st)
			if err != nil {
				return false, err
			}
			for _, it := range items {
				last = append(last, fmt.Sprintf("%s %s v%d run %q signal %s/%s/v%d", it.ID, it.State, it.Version, it.RunID, it.Signal, it.SignalRun, it.SignalVersion))
				if st != state.Idle || it.Signal != state.SignalDeregistered {
					ok = false
				}
			}
			if st == state.Idle && len(items) != n {
				ok = false
			}
		}
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("%w; the pool holds: %s", err, strings.Join(last, "; "))
	}
	return nil
}

// jobStart is how long after the job's queued delivery its runner started: the REGISTERED signal
// of the instance that served it.
func jobStart(ctx context.Context, e *localenv.Env, job int64) (time.Duration, error) {
	var delivered time.Time
	for _, d := range e.GH.Deliveries() {
		if d.JobID == job && d.Action == "queued" {
			delivered = d.At
			break
		}
	}
	done, _ := e.GH.Job(job)
	id, key, ok := e.RunnerNames().Parse(done.RunnerName)
	if delivered.IsZero() || !ok {
		return 0, fmt.Errorf("job %d: no queued delivery, or not run by a runner of the stack (%q)", job, done.RunnerName)
	}
	started, err := registeredAt(e, id, key)
	if err != nil {
		return 0, err
	}
	return started.Sub(delivered), nil
}

// registeredAt reads when the agent of id signalled REGISTERED for key, from its log.
func registeredAt(e *localenv.Env, id, key string) (time.Time, error) {
	for _, line := range strings.Split(e.Sim.AgentLog(id), "\n") {
		if strings.Contains(line, `"msg":"runner started"`) && strings.Contains(line, `"job":"`+key+`"`) {
			var at struct {
				Time time.Time `json:"time"`
			}
			if err := json.Unmarshal([]byte(line), &at); err == nil {
				return at.Time, nil
			}
		}
	}
	return time.Time{}, fmt.Errorf("%s: no runner started for %s in its log", id, key)
}
