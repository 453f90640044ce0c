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
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
)

func init() { register("agent", benchAgent) }

// Targets of the agent.
const (
	noticedP95Target    = 200 * time.Millisecond
	idleRequestsPerHour = 600
	// idleWindow spans several doorbell long polls (20 s) and heartbeats (30 s).
	idleWindow        = 2 * time.Minute
	agentRSSTargetMB  = 30
	agentRSSGrowthMB  = 2
	rssBaselineRun    = 10
	detectionLogMsg   = "assignment noticed"
	detectionLogKey   = "detectionMs"
	claimPhaseSpread  = 200 * time.Millisecond
	pollingPerHourWas = 3600
)

func benchAgent(ctx context.Context, cfg benchConfig) ([]Row, error) {
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
	var baseline float64
	for round := range cfg.agentRuns {
		// Claims arrive at any moment relative to the agent's long polls and heartbeats.
		if err := wait.Sleep(ctx, rand.N(claimPhaseSpread)); err != nil {
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
		if round+1 == rssBaselineRun {
			if baseline, err = rssMB(e.Sim.AgentPID(id)); err != nil {
				return nil, err
			}
		}
	}
	rss, err := rssMB(e.Sim.AgentPID(id))
	if err != nil {
		return nil, err
	}
	detections, err := logDurations(e.Sim.AgentLog(id), detectionLogMsg, detectionLogKey)
	if err != nil {
		return nil, err
	}
	if len(detections) != cfg.agentRuns {
		return nil, fmt.Errorf("found %d detection log lines for %d claims", len(detections), cfg.agentRuns)
	}

	// Idle: every request the agent makes (its item in DynamoDB, its doorbell in SQS).
	count := func() int64 { return e.Sim.RequestCount(id) + e.Sim.SQSRequestCount(id) }
	before := count()
	if err := wait.Sleep(ctx, idleWindow); err != nil {
		return nil, err
	}
	perHour := float64(count()-before) * float64(time.Hour) / float64(idleWindow)

	return []Row{
		timed(fmt.Sprintf("agent: assignment noticed, claim write → agent has read it (%d claims)", cfg.agentRuns), detections, noticedP95Target, true).
			note("the hand-over rings the doorbell, then one read of the item that acknowledges the claim"),
		row("agent: AWS requests per idle instance-hour, heartbeats included", "requests", perHour, idleRequestsPerHour,
			fmt.Sprintf("≤ %d", idleRequestsPerHour)).note(fmt.Sprintf("measured over %s idle: doorbell long polls + heartbeat reads; polling every second made %d", idleWindow, pollingPerHourWas)),
		row(fmt.Sprintf("agent: resident memory after %d runs", cfg.agentRuns), "MB", rss, agentRSSTargetMB, fmt.Sprintf("≤ %d MB", agentRSSTargetMB)),
		row(fmt.Sprintf("agent: resident memory growth, run %d → run %d", rssBaselineRun, cfg.agentRuns), "MB", max(rss-baseline, 0), agentRSSGrowthMB,
			fmt.Sprintf("≤ %d MB (no growth)", agentRSSGrowthMB)).note(fmt.Sprintf("%.1f MB → %.1f MB", baseline, rss)),
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

// rssMB reads a process's resident set size in MB (2^20 bytes).
func rssMB(pid int) (float64, error) {
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
