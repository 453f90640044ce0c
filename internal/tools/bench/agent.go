package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/state"
	"github.com/hangar-ci/hangar/pkg/wait"
)

func init() { register("agent", benchAgent) }

// Targets of the agent (issue: notice a run within 1 s at p95, at most one DynamoDB request a
// second when idle; RSS: a small share of the smallest runner instance's memory).
const (
	detectionP95Target  = time.Second
	idleRequestsPerHour = 3600
	idleWindow          = 30 * time.Second // one heartbeat interval
	agentRSSTargetMiB   = 40
	// deregisteredP95Target: from release's write to DEREGISTERED, the cleanup included; release
	// waits up to its deregister-timeout (2 min), and a warm instance is reusable only after it.
	deregisteredP95Target = 5 * time.Second
	cleanupLogMessage     = "run cleaned up"
	detectionLogMessage   = "assignment noticed"
	agentDetectionLogKey  = "detectionMs"
)

func benchAgent(ctx context.Context, cfg benchConfig) ([]Row, error) {
	// The agent runs with its defaults: one poll a second, a heartbeat every 30 s.
	e, err := localenv.Start(ctx, localenv.Options{Baked: true})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	id, err := e.Launch(ctx, time.Time{})
	if err != nil {
		return nil, err
	}
	in, err := e.Warm(ctx, id)
	if err != nil {
		return nil, err
	}
	var deregistered []time.Duration
	for round := range cfg.rounds {
		// Claims arrive at any moment relative to the agent's polls: wait a random part of a
		// poll interval, or every claim would land just after the poll that saw the release.
		if err := wait.Sleep(ctx, rand.N(time.Second)); err != nil {
			return nil, err
		}
		run := strconv.Itoa(5000 + round)
		claimed, err := e.Claim(ctx, in, run)
		if err != nil {
			return nil, err
		}
		reg, err := e.WaitSignal(ctx, id, state.SignalRegistered, run, claimed.Version)
		if err != nil {
			return nil, err
		}
		running, err := e.Transition(ctx, state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: reg.Version, RunID: run})
		if err != nil {
			return nil, err
		}
		released, err := e.Release(ctx, running)
		if err != nil {
			return nil, err
		}
		if in, err = e.WaitSignal(ctx, id, state.SignalDeregistered, run, released.Version); err != nil {
			return nil, err
		}
		deregistered = append(deregistered, in.SignalAt.Sub(released.UpdatedAt))
	}
	cleanups, err := logDurations(e.Sim.AgentLog(id), cleanupLogMessage, "ms")
	if err != nil {
		return nil, err
	}
	detections, err := logDurations(e.Sim.AgentLog(id), detectionLogMessage, agentDetectionLogKey)
	if err != nil {
		return nil, err
	}
	if len(detections) != cfg.rounds {
		return nil, fmt.Errorf("found %d detection log lines for %d claims", len(detections), cfg.rounds)
	}

	before := e.Sim.RequestCount(id)
	if err := wait.Sleep(ctx, idleWindow); err != nil {
		return nil, err
	}
	perHour := float64(e.Sim.RequestCount(id)-before) * float64(time.Hour) / float64(idleWindow)
	rss, err := rssMiB(e.Sim.AgentPID(id))
	if err != nil {
		return nil, err
	}

	p50, p95 := percentile(detections, 50), percentile(detections, 95)
	d50, d95 := percentile(deregistered, 50), percentile(deregistered, 95)
	return []Row{
		{Metric: fmt.Sprintf("agent: assignment detection p50 / p95 (%d claims at random phases)", cfg.rounds),
			Measured: secs(p50) + " / " + secs(p95), Target: "p95 ≤ " + secs(detectionP95Target), OK: p95 <= detectionP95Target},
		{Metric: "agent: DynamoDB requests per idle instance-hour", Measured: fmt.Sprintf("%.0f", perHour),
			Target: fmt.Sprintf("≤ %d (one a second, heartbeats included)", idleRequestsPerHour), OK: perHour <= idleRequestsPerHour},
		{Metric: "agent: release → DEREGISTERED p50 / p95 (noticing, killing the run's processes, deregistering, removing its files)",
			Measured: fmt.Sprintf("%s / %s (cleanup itself p50 %s)", secs(d50), secs(d95), secs(percentile(cleanups, 50))),
			Target:   "p95 ≤ " + secs(deregisteredP95Target), OK: d95 <= deregisteredP95Target},
		{Metric: "agent: resident memory after serving", Measured: fmt.Sprintf("%.1f MiB", rss),
			Target: fmt.Sprintf("≤ %d MiB", agentRSSTargetMiB), OK: rss <= agentRSSTargetMiB},
	}, nil
}

// logDurations reads, from the agent's JSON log, the milliseconds under key of every line whose
// message is msg.
func logDurations(log, msg, key string) ([]time.Duration, error) {
	var out []time.Duration
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil || line["msg"] != msg {
			continue
		}
		ms, ok := line[key].(float64)
		if !ok {
			return nil, fmt.Errorf("log line without %s: %s", key, sc.Text())
		}
		out = append(out, time.Duration(ms)*time.Millisecond)
	}
	return out, sc.Err()
}

// rssMiB reads a process's resident set size.
func rssMiB(pid int) (float64, error) {
	if pid == 0 {
		return 0, fmt.Errorf("the agent is not running")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}
