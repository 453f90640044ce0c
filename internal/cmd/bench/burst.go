package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/internal/testkit/awsproxy"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	jobmsg "github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/labels/dispatch"
)

func init() { register("burst", benchBurst) }

// The burst (docs/benchmarks.md): burstJobs label-routed jobs at once over burstWarm warm
// instances, under a pool cap of burstCap, with the control plane's AWS requests delayed as AWS
// answers them.
const (
	burstJobs = 200
	burstWarm = 20
	burstCap  = 40
	// burstStartTarget: the burst on the jobs queue → runner registered, for the jobs that found
	// a warm instance, p50 and p95: six batches at once contend for the claims.
	burstStartP50Target = time.Second
	burstStartP95Target = 2 * time.Second
	// burstIdleTarget: how long an instance back in the pool stays free while jobs wait, p95: the
	// pool is work-conserving.
	burstIdleTarget = time.Second
	// burstDoneTarget: the whole burst run; 200 one-second jobs on 40 instances are five waves of
	// hand-over, job and wipe, a few seconds each when the pool is work-conserving.
	burstDoneTarget = 45 * time.Second
	// burstAWSTarget and burstGitHubTarget: requests per job under a burst (waiting and waking
	// add to the one-job row's 24; batches of ten share their reads and writes).
	burstAWSTarget    = 30
	burstGitHubTarget = 3
	// sweepInstallations and sweepHourTarget: the sweep's GitHub requests in an hour (twelve
	// sweeps) for ten installations of one repository each, with nothing lost.
	sweepInstallations = 10
	sweepHourTarget    = 300
)

// awsLatency is what AWS takes to answer the control plane, roughly: a few milliseconds for
// DynamoDB, tens for SQS and EC2's reads and small writes, about a second for CreateFleet.
func awsLatency(op string) time.Duration {
	switch {
	case op == "EC2.CreateFleet":
		return time.Second
	case strings.HasPrefix(op, "DynamoDB."):
		return 4 * time.Millisecond
	}
	return 25 * time.Millisecond
}

// burstCPUShares weighs the burst's simulated instances together as one process on the test
// bed's CPUs (localenv.Options.InstanceCPUShares): on AWS each has CPUs of its own, and forty of
// them booting and scrubbing at once must not set the pace of the emulators and the control plane
// measured beside them; lower, their own work sets the pace of the burst instead. The other
// suites run a few instances, and their rows count the agents' own work.
const burstCPUShares = 1024

// benchBurst measures a burst of label-routed jobs under a cap, and the sweep's cost.
func benchBurst(ctx context.Context, cfg benchConfig) ([]Row, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	e, err := localenv.Start(ctx, localenv.Options{InstanceCPUShares: burstCPUShares, Stack: fmt.Sprintf("bench-burst-%d", time.Now().Unix()%1e6), Baked: true})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	// The sweep's installations' repositories are in the trust set.
	if err := e.UpdatePool(ctx, func(d *pooldoc.Document) {
		for i := range sweepInstallations - 1 {
			d.AllowedRepositories = append(d.AllowedRepositories, sweepRepo(i))
		}
	}); err != nil {
		return nil, err
	}
	// The stack's event source mappings: batches of 10, up to 6 invocations on the jobs queue and
	// 8 on the returns queue at once (infra/stack/jobs.go).
	j, err := serveWarm(ctx, e, localenv.JobsOptions{MaxInstances: burstCap, BatchSize: 10, JobsPollers: 6, ReturnsPollers: 8,
		CheckAfter: time.Minute, SweepEvery: time.Second}, burstWarm, 900000)
	if err != nil {
		return nil, err
	}
	idle, err := e.Store.InPoolState(ctx, e.Pool, state.Idle)
	if err != nil {
		return nil, err
	}
	warmIDs := map[string]bool{}
	for _, it := range idle {
		warmIDs[it.ID] = true
	}

	j.Moto.SetFaults(awsproxy.Faults{LatencyOf: awsLatency, Jitter: 10 * time.Millisecond})
	j.DDB.SetFaults(awsproxy.Faults{LatencyOf: awsLatency, Jitter: 2 * time.Millisecond})
	j.Moto.Take()
	j.DDB.Take()
	j.GitHub.Take()
	// The burst reaches the dispatcher at once: held while the webhook takes its deliveries (the
	// stand-in sends them one at a time, GitHub many at once), then let go.
	j.Pause()
	var burst []int64
	for i := range burstJobs {
		burst = append(burst, j.QueueJob(localenv.Repo, int64(910000+i), labels, "sleep 1"))
	}
	if err := localenv.Eventually(ctx, 5*time.Minute, "the burst's queued deliveries taken", func(context.Context) (bool, error) {
		taken := 0
		for _, d := range e.GH.Deliveries() {
			if d.Action == "queued" && d.Status == 202 && slices.Contains(burst, d.JobID) {
				taken++
			}
		}
		return taken >= burstJobs, nil
	}); err != nil {
		j.Resume()
		return nil, err
	}
	start := time.Now()
	j.Resume()
	if err := waitJobsWithin(ctx, e, burst, 10*time.Minute); err != nil {
		return nil, err
	}
	done := time.Since(start)
	aws := j.Moto.Take()
	for k, v := range j.DDB.Take() {
		aws[k] += v
	}
	gh := j.GitHub.Take()
	j.Moto.SetFaults(awsproxy.Faults{})
	j.DDB.SetFaults(awsproxy.Faults{})
	launched := 0
	for _, it := range allItems(ctx, e) {
		if !warmIDs[it] {
			launched++
		}
	}

	starts, idleGaps, err := burstTimes(e, burst, warmIDs, start)
	if err != nil {
		return nil, err
	}
	perJob := func(ops map[string]int) float64 { return float64(awsproxy.Sum(ops)) / burstJobs }

	sweepHour, err := sweepCost(ctx, e, j)
	if err != nil {
		return nil, err
	}
	p50, p95 := percentile(starts, 50), percentile(starts, 95)
	return []Row{
		row("burst: jobs queue → runner registered, warm instance, p50", "s", p50.Seconds(), burstStartP50Target.Seconds(), "p50 ≤ "+secs(burstStartP50Target)).
			note(fmt.Sprintf("%d jobs on the jobs queue at once over %d warm instances, cap %d, AWS delayed as AWS answers; the %d jobs that found a warm instance; p95 %s",
				burstJobs, burstWarm, burstCap, len(starts), secs(p95))),
		row("burst: jobs queue → runner registered, warm instance, p95", "s", p95.Seconds(), burstStartP95Target.Seconds(), "p95 ≤ "+secs(burstStartP95Target)),
		timed("burst: an instance back in the pool idle while jobs wait", idleGaps, burstIdleTarget, true).
			note(fmt.Sprintf("%d returns while jobs waited: from the agent's DEREGISTERED to its next hand-over (return, wake, runner, doorbell)", len(idleGaps))),
		row("burst: all jobs done", "s", done.Seconds(), burstDoneTarget.Seconds(), "≤ "+secs(burstDoneTarget)).
			note(fmt.Sprintf("%d one-second jobs; %d instances launched, never more than the cap", burstJobs, launched)),
		row("burst: AWS requests of the control plane", "requests", perJob(aws), burstAWSTarget, fmt.Sprintf("≤ %d", burstAWSTarget)).
			note("per job: " + breakdown(aws, burstJobs)),
		row("burst: GitHub API requests", "requests", perJob(gh), burstGitHubTarget, fmt.Sprintf("≤ %d", burstGitHubTarget)).
			note("per job: " + breakdown(gh, burstJobs)),
		row("sweep: GitHub requests an hour, 10 installations", "requests", float64(sweepHour), sweepHourTarget, fmt.Sprintf("≤ %d", sweepHourTarget)).
			note("twelve sweeps (one an hour at the five-minute schedule), nothing lost: the deliveries, each repository's runs of the last day, the installations and their repositories once an hour, a token per installation"),
	}, nil
}

// waitJobsWithin is waitJobs with a deadline of its own.
func waitJobsWithin(ctx context.Context, e *localenv.Env, jobs []int64, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for _, id := range jobs {
		j, err := e.GH.WaitJob(ctx, id)
		if err != nil {
			return err
		}
		if j.Conclusion != "success" {
			return fmt.Errorf("job %d: %s: %s", id, j.Conclusion, j.Output)
		}
	}
	return nil
}

// allItems returns the ids of every instance the pool has had an item for.
func allItems(ctx context.Context, e *localenv.Env) []string {
	var out []string
	for _, st := range []state.State{state.Idle, state.Claimed, state.Running, state.Created, state.Stopped} {
		items, _ := e.Store.InPoolState(ctx, e.Pool, st)
		for _, it := range items {
			out = append(out, it.ID)
		}
	}
	return out
}

// agentEvent is a line of an agent's log the burst's figures come from.
type agentEvent struct {
	at   time.Time
	kind string // handover, deregistered
	run  string
}

// agentEvents reads the hand-overs and DEREGISTERED signals from an instance's agent log.
func agentEvents(log string) []agentEvent {
	var out []agentEvent
	for _, line := range strings.Split(log, "\n") {
		var l struct {
			Time   time.Time `json:"time"`
			Msg    string    `json:"msg"`
			Signal string    `json:"signal"`
			Run    string    `json:"run"`
		}
		if json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		switch {
		case l.Msg == "hand-over received":
			out = append(out, agentEvent{l.Time, "handover", l.Run})
		case l.Msg == "signalled" && l.Signal == string(state.SignalDeregistered):
			out = append(out, agentEvent{l.Time, "deregistered", l.Run})
		}
	}
	return out
}

// burstTimes returns, for the burst's jobs that found a warm instance (each warm instance's
// first job of the burst), the time from the burst reaching the dispatcher (start) to the runner
// registered; and, for
// every instance, how long it stayed free after its agent wiped a burst job's run while jobs still
// waited for one (from the burst reaching the dispatcher to its last hand-over).
func burstTimes(e *localenv.Env, burst []int64, warm map[string]bool, start time.Time) ([]time.Duration, []time.Duration, error) {
	type served struct {
		job        int64
		registered time.Time
	}
	first := map[string]served{}
	for _, id := range burst {
		done, _ := e.GH.Job(id)
		inst, key, ok := e.RunnerNames().Parse(done.RunnerName)
		if !ok {
			return nil, nil, fmt.Errorf("job %d ran on %q, not a runner of the stack", id, done.RunnerName)
		}
		if !warm[inst] {
			continue
		}
		at, err := registeredAt(e, inst, key)
		if err != nil {
			return nil, nil, err
		}
		if f, ok := first[inst]; !ok || at.Before(f.registered) {
			first[inst] = served{id, at}
		}
	}
	var starts []time.Duration
	for _, f := range first {
		starts = append(starts, f.registered.Sub(start))
	}
	ours := map[string]bool{}
	for _, id := range burst {
		ours[names.JobKey(id, 0)] = true
	}
	burstRun := func(run string) bool { key, _, _ := strings.Cut(run, "r"); return ours[key] } // j<id>r<n>: placed again
	var last time.Time
	events := map[string][]agentEvent{}
	for _, id := range e.Sim.Running() {
		evs := agentEvents(e.Sim.AgentLog(id))
		events[id] = evs
		for _, ev := range evs {
			if ev.kind == "handover" && burstRun(ev.run) && ev.at.After(last) {
				last = ev.at
			}
		}
	}
	var gaps []time.Duration
	for _, evs := range events {
		slices.SortFunc(evs, func(a, b agentEvent) int { return a.at.Compare(b.at) })
		for i := 0; i+1 < len(evs); i++ {
			if evs[i].kind == "deregistered" && evs[i+1].kind == "handover" && evs[i].at.After(start) && evs[i].at.Before(last) &&
				burstRun(evs[i].run) && burstRun(evs[i+1].run) {
				gaps = append(gaps, evs[i+1].at.Sub(evs[i].at))
			}
		}
	}
	if len(starts) == 0 || len(gaps) == 0 {
		return nil, nil, fmt.Errorf("the burst measured nothing: %d warm starts, %d returns while jobs waited", len(starts), len(gaps))
	}
	return starts, gaps, nil
}

// sweepRepo is the repository of the sweep's i-th installation beyond the world's own.
func sweepRepo(i int) string { return fmt.Sprintf("sweep-%d/app", i) }

// sweepCost installs the App on sweepInstallations accounts of one repository each (the world's
// own counts as one), runs twelve sweeps, and returns their GitHub requests.
func sweepCost(ctx context.Context, e *localenv.Env, j *localenv.Jobs) (int, error) {
	for i := range sweepInstallations - 1 {
		owner, _, _ := strings.Cut(sweepRepo(i), "/")
		e.GH.Install(owner, sweepRepo(i))
	}
	j.GitHub.Take()
	for i := range 12 {
		if failed := j.Dispatcher.Handle(ctx, []dispatch.Message{{ID: fmt.Sprintf("sweep-%d", i), Body: jobmsg.SweepMessage,
			Source: dispatch.FromJobs, Receives: 1}}); len(failed) > 0 {
			return 0, fmt.Errorf("sweep %d failed", i)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(600 * time.Millisecond): // past half the world's one-second sweep period
		}
	}
	n := awsproxy.Sum(j.GitHub.Take())
	if n == 0 {
		return 0, fmt.Errorf("the sweeps asked GitHub nothing")
	}
	return n, nil
}
