package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
	"github.com/hangar-ci/hangar/pkg/state"
)

func init() { register("provision", benchProvision) }

// Targets (issue: overhead p50 ≤ 0.3 s for 1 and ≤ 1 s for 10; release ≤ 1 s beyond the agents'
// deregistration; one CreateFleet per request). The seed's cold-provision overhead was 10.2 s.
const (
	warm1Target       = 300 * time.Millisecond
	warm10Target      = time.Second
	releaseBeyond     = time.Second
	seedColdOverhead  = 10200 * time.Millisecond
	benchProvisionRun = 900000
)

// stepRunner runs the provision and release binaries as the action does, against the local
// world, with their AWS traffic through counting proxies.
type stepRunner struct {
	e                    *localenv.Env
	provisionBin, relBin string
	moto, ddb            *awsProxy
	dir                  string
}

// run runs a step binary as the action does (localenv.StepEnv), with its AWS traffic through the
// counting proxies, and returns how long it took, the requests it made and what it left.
func (s *stepRunner) run(ctx context.Context, bin, run string, n int) (time.Duration, map[string]int, localenv.StepResult, error) {
	env := append(s.e.StepEnv(run, n, s.dir), "AWS_ENDPOINT_URL="+s.moto.url(), "AWS_ENDPOINT_URL_DYNAMODB="+s.ddb.url())
	s.moto.take()
	s.ddb.take()
	start := time.Now()
	res, err := localenv.RunStep(ctx, bin, env, s.dir)
	took := time.Since(start)
	ops := s.moto.take()
	for k, v := range s.ddb.take() {
		ops[k] += v
	}
	if err != nil {
		return took, ops, res, fmt.Errorf("run %s: %w", run, err)
	}
	return took, ops, res, nil
}

// instanceIDs reads a provision step's instance-ids output.
func instanceIDs(res localenv.StepResult) ([]string, error) {
	var ids []string
	if err := json.Unmarshal([]byte(res.Outputs["instance-ids"]), &ids); err != nil {
		return nil, fmt.Errorf("instance-ids output %q: %w", res.Outputs["instance-ids"], err)
	}
	return ids, nil
}

// agentSpan is how long the agents themselves took for run: for each instance, from the write
// that handed it the run to its REGISTERED signal; the longest.
func (s *stepRunner) agentSpan(ctx context.Context, ids []string, run string) (time.Duration, error) {
	items, err := s.e.Store.GetMany(ctx, ids)
	if err != nil {
		return 0, err
	}
	var span time.Duration
	for _, id := range ids {
		it, ok := items[id]
		if !ok || it.SignalRun != run {
			return 0, fmt.Errorf("%s: no REGISTERED signal for run %s", id, run)
		}
		handed, err := assignedAt(s.e.Sim.AgentLog(id), run)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", id, err)
		}
		span = max(span, it.SignalAt.Sub(handed))
	}
	return span, nil
}

// assignedAt reads from an agent's log when the run was written to its item: the moment the
// agent noticed it, less how long that took.
func assignedAt(log, run string) (time.Time, error) {
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var at time.Time
	for sc.Scan() {
		var line struct {
			Time        time.Time `json:"time"`
			Msg         string    `json:"msg"`
			Run         string    `json:"run"`
			DetectionMs int64     `json:"detectionMs"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == detectionLogMessage && line.Run == run {
			at = line.Time.Add(-time.Duration(line.DetectionMs) * time.Millisecond)
		}
	}
	if at.IsZero() {
		return at, fmt.Errorf("the agent never noticed run %s", run)
	}
	return at, nil
}

// deregSpan is how long the agents took to deregister after release wrote idle: the longest.
func (s *stepRunner) deregSpan(ctx context.Context, ids []string, run string) (time.Duration, error) {
	items, err := s.e.Store.GetMany(ctx, ids)
	if err != nil {
		return 0, err
	}
	var span time.Duration
	for _, id := range ids {
		it := items[id]
		if it == nil || !it.SignalFor(state.SignalDeregistered, run, 0) {
			return 0, fmt.Errorf("%s: no DEREGISTERED for run %s", id, run)
		}
		// The item's last control-plane write is release's running → idle (updatedAt).
		span = max(span, it.SignalAt.Sub(it.UpdatedAt))
	}
	return span, nil
}

func benchProvision(ctx context.Context, cfg benchConfig) ([]Row, error) {
	e, err := localenv.Start(ctx, localenv.Options{Baked: true})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	s := &stepRunner{e: e}
	if s.provisionBin, err = testbuild.Build("github.com/hangar-ci/hangar/cmd/provision"); err != nil {
		return nil, err
	}
	if s.relBin, err = testbuild.Build("github.com/hangar-ci/hangar/cmd/release"); err != nil {
		return nil, err
	}
	if s.moto, err = newAWSProxy(os.Getenv("AWS_ENDPOINT_URL")); err != nil {
		return nil, err
	}
	defer s.moto.close()
	if s.ddb, err = newAWSProxy(os.Getenv("AWS_ENDPOINT_URL_DYNAMODB")); err != nil {
		return nil, err
	}
	defer s.ddb.close()
	if s.dir, err = os.MkdirTemp("", "hangar-bench-"); err != nil {
		return nil, err
	}
	defer os.RemoveAll(s.dir)

	// Cold: ten instances created, in one request.
	run := benchProvisionRun
	coldTook, coldOps, coldRes, err := s.run(ctx, s.provisionBin, strconv.Itoa(run), 10)
	if err != nil {
		return nil, err
	}
	coldIDs, err := instanceIDs(coldRes)
	if err != nil {
		return nil, err
	}
	coldSpan, err := s.agentSpan(ctx, coldIDs, strconv.Itoa(run))
	if err != nil {
		return nil, err
	}
	if _, _, _, err := s.run(ctx, s.relBin, strconv.Itoa(run), 0); err != nil {
		return nil, err
	}
	rows := []Row{
		{Metric: "cold provision of 10: CreateFleet calls", Measured: strconv.Itoa(coldOps["EC2.CreateFleet"]), Target: "1", OK: coldOps["EC2.CreateFleet"] == 1},
		{Metric: "cold provision of 10: EC2 API calls per created instance", Measured: fmt.Sprintf("%.1f", float64(ec2Calls(coldOps))/10),
			Target: "≤ 0.5", OK: float64(ec2Calls(coldOps))/10 <= 0.5},
		{Metric: "cold provision of 10: control-plane overhead (total − agents)", Measured: secs(coldTook-coldSpan) + fmt.Sprintf(" (total %s)", secs(coldTook)),
			Target: "≤ " + secs(seedColdOverhead*10/25) + " (seed's 10.2 s ÷ 2.5)", OK: coldTook-coldSpan <= seedColdOverhead*10/25},
	}

	// Warm: the same instances, reused round after round.
	for _, n := range []int{1, 10} {
		rounds := cfg.rounds
		if n == 10 {
			rounds = max(cfg.rounds/2, 1)
		}
		var totals, overheads, relTotals, relBeyond []time.Duration
		var requests, waitReads int
		for range rounds {
			run++
			r := strconv.Itoa(run)
			took, ops, res, err := s.run(ctx, s.provisionBin, r, n)
			if err != nil {
				return nil, err
			}
			ids, err := instanceIDs(res)
			if err != nil {
				return nil, err
			}
			if ops["EC2.CreateFleet"] != 0 {
				return nil, fmt.Errorf("warm provision of %d created instances", n)
			}
			span, err := s.agentSpan(ctx, ids, r)
			if err != nil {
				return nil, err
			}
			totals, overheads = append(totals, took), append(overheads, took-span)
			requests += sum(ops)
			waitReads += ops["DynamoDB.BatchGetItem"]
			relTook, _, _, err := s.run(ctx, s.relBin, r, 0)
			if err != nil {
				return nil, err
			}
			dereg, err := s.deregSpan(ctx, ids, r)
			if err != nil {
				return nil, err
			}
			relTotals, relBeyond = append(relTotals, relTook), append(relBeyond, relTook-dereg)
		}
		target := warm1Target
		if n == 10 {
			target = warm10Target
		}
		perRun := float64(requests) / float64(rounds)
		rows = append(rows,
			Row{Metric: fmt.Sprintf("warm provision of %d: total p50 (agents poll every 1 s)", n), Measured: secs(percentile(totals, 50)),
				Target: fmt.Sprintf("none: the agents' polling dominates (seed: %s with an instant agent)", secs(map[int]time.Duration{1: seedWarm1, 10: seedWarm10}[n])), Info: true},
			Row{Metric: fmt.Sprintf("warm provision of %d: control-plane overhead p50 / p95", n),
				Measured: secs(percentile(overheads, 50)) + " / " + secs(percentile(overheads, 95)),
				Target:   "p50 ≤ " + secs(target), OK: percentile(overheads, 50) <= target},
			Row{Metric: fmt.Sprintf("warm provision of %d: AWS requests (work + reads while agents register)", n),
				Measured: fmt.Sprintf("%.1f (%.1f + %.1f)", perRun, perRun-float64(waitReads)/float64(rounds), float64(waitReads)/float64(rounds)),
				Target:   fmt.Sprintf("< %d (seed: 6 + 7N)", 6+7*n), OK: perRun < float64(6+7*n)},
			Row{Metric: fmt.Sprintf("release of %d: total p50 / beyond the agents' deregistration p50", n),
				Measured: secs(percentile(relTotals, 50)) + " / " + secs(percentile(relBeyond, 50)),
				Target:   "beyond ≤ " + secs(releaseBeyond) + " (seed: 10.2 s total)", OK: percentile(relBeyond, 50) <= releaseBeyond},
		)
	}
	return rows, nil
}

func ec2Calls(ops map[string]int) int {
	n := 0
	for k, v := range ops {
		if strings.HasPrefix(k, "EC2.") {
			n += v
		}
	}
	return n
}
