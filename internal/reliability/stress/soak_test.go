package stress

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// Slack allowed between the first and the last tenth of the soak, per agent.
const (
	rssSlackKiB   = 3 * 1024 // RSS: +3 MiB
	fdSlack       = 2        // open files
	threadsSlack  = 2        // OS threads (the goroutines' proxy, see TestSoak)
	soakCycleTime = 3 * time.Minute
)

// agentSample is what /proc says of one agent process.
type agentSample struct {
	pid          int
	rssKiB       int
	threads, fds int
}

// TestSoak: provision/release cycles of the whole pool, one after the other. No instance leaks;
// the agents do not grow (resident memory, open files, and threads, compared between the first and
// the last tenth of the cycles, with a small absolute slack); the pool offers each idle
// instance once at the end.
//
// The agent has no debug endpoint, so goroutines cannot be counted from outside: the agent
// process's OS thread count (/proc/<pid>/status Threads) stands in for them. It catches
// goroutines stuck in blocking system calls (each holds a thread), not those parked on channels.
func TestSoak(t *testing.T) {
	t.Parallel()
	sc, _ := suite(t) // the soak makes no random choice: no seed
	t.Logf("TestSoak (%s form): %d provision/release cycles of a pool of %d; growth allowed per agent: RSS +%d KiB, fds +%d, threads +%d (threads stand in for goroutines)",
		sc.Form, sc.SoakCycles, sc.SoakPool, rssSlackKiB, fdSlack, threadsSlack)
	w := newWorld(t, "soak", worldOptions{Budget: 30 * time.Minute})
	w.fill(t, "3000", sc.SoakPool)

	samples := make([]map[string]agentSample, sc.SoakCycles)
	created := 0
	var steps []time.Duration // provision, release, provision, …
	start := time.Now()
	for cycle := range sc.SoakCycles {
		run := strconv.Itoa(300000 + cycle)
		ctx, cancel := context.WithTimeout(w.ctx, soakCycleTime)
		began := time.Now()
		res, ids, err := w.provision(ctx, run, sc.SoakPool, "HANGAR_REGISTRATION_TIMEOUT=2m")
		require.NoError(t, err, "cycle %d: provision\n%s", cycle, tail(res.Log, 3000))
		require.Len(t, ids, sc.SoakPool, "cycle %d", cycle)
		n, _ := strconv.Atoi(res.Outputs["created"])
		created += n
		provisionTook := time.Since(began)
		began = time.Now()
		rel, err := w.release(ctx, run)
		cancel()
		require.NoError(t, err, "cycle %d: release\n%s", cycle, tail(rel.Log, 3000))
		steps = append(steps, provisionTook, time.Since(began))

		samples[cycle] = w.sampleAgents(t, ids)
		// Every cycle: the run holds nothing in the table or on GitHub. Every fifth of the soak
		// (EC2 is slow to ask in the emulator): nothing launched for it runs, nothing leaked.
		byRun, err := w.Store.ByRun(w.ctx, run)
		require.NoError(t, err)
		require.Empty(t, byRun, "cycle %d: items still hold run %s", cycle, run)
		require.Empty(t, w.runnersOf(run), "cycle %d: runners of run %s are left", cycle, run)
		if (cycle+1)%max(1, sc.SoakCycles/5) == 0 || cycle == sc.SoakCycles-1 {
			held, orphans, err := w.heldBy(w.ctx, run)
			require.NoError(t, err)
			require.Empty(t, append(held, orphans...), "cycle %d", cycle)
			leaked, err := w.Leaked(w.ctx)
			require.NoError(t, err)
			require.Empty(t, leaked, "cycle %d: leaked instances", cycle)
			t.Logf("cycle %d/%d after %s (provision %s, release %s): %s", cycle+1, sc.SoakCycles, since(start),
				steps[len(steps)-2].Round(10*time.Millisecond), steps[len(steps)-1].Round(10*time.Millisecond), describeSamples(samples[cycle]))
		}
	}

	window := max(1, sc.SoakCycles/10)
	first, last := peaks(samples[:window]), peaks(samples[len(samples)-window:])
	var grew []string
	compared := 0
	for id, a := range first {
		b, ok := last[id]
		if !ok || a.pid != b.pid {
			t.Logf("%s: not compared (agent pid %d in the first tenth, %d in the last)", id, a.pid, b.pid)
			continue
		}
		compared++
		if b.rssKiB > a.rssKiB+rssSlackKiB {
			grew = append(grew, fmt.Sprintf("%s: RSS %d → %d KiB", id, a.rssKiB, b.rssKiB))
		}
		if b.fds > a.fds+fdSlack {
			grew = append(grew, fmt.Sprintf("%s: open files %d → %d", id, a.fds, b.fds))
		}
		if b.threads > a.threads+threadsSlack {
			grew = append(grew, fmt.Sprintf("%s: threads %d → %d", id, a.threads, b.threads))
		}
	}
	slices.Sort(grew)
	require.NotZero(t, compared, "no agent ran through the whole soak")
	require.Empty(t, grew, "agents grew between the first %d and the last %d cycles (first: %s; last: %s)",
		window, window, describeSamples(first), describeSamples(last))

	idle := w.inState(t, state.Idle)
	offered, err := w.Offered(w.ctx)
	require.NoError(t, err)
	depth := 0
	for _, n := range offered {
		depth += n
	}
	require.Equal(t, len(idle), depth, "pool depth against idle instances: offered %s", pairs(offered))
	require.Empty(t, offerCountProblems(idle, offered))
	t.Logf("TestSoak (%s form) summary: %d cycles of %d in %s (%d instances created along the way), pool depth %d = idle %d; first tenth %s; last tenth %s",
		sc.Form, sc.SoakCycles, sc.SoakPool, since(start), created, depth, len(idle), describeSamples(first), describeSamples(last))
}

// sampleAgents reads /proc for the agents of ids.
func (w *world) sampleAgents(t *testing.T, ids []string) map[string]agentSample {
	t.Helper()
	out := map[string]agentSample{}
	for _, id := range ids {
		pid := w.Sim.AgentPID(id)
		if pid == 0 {
			continue
		}
		s, err := readProc(pid)
		require.NoError(t, err, "agent of %s", id)
		out[id] = s
	}
	return out
}

// readProc reads a process's resident memory and thread count (/proc/<pid>/status) and counts
// its open files (/proc/<pid>/fd).
func readProc(pid int) (agentSample, error) {
	s := agentSample{pid: pid}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		switch k {
		case "VmRSS":
			s.rssKiB, _ = strconv.Atoi(f[0])
		case "Threads":
			s.threads, _ = strconv.Atoi(f[0])
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, err
	}
	s.fds = len(fds)
	return s, nil
}

// peaks returns, per instance, the highest of each measure over the cycles (an agent whose pid
// changed keeps the last pid, so the comparison sees the restart).
func peaks(cycles []map[string]agentSample) map[string]agentSample {
	out := map[string]agentSample{}
	for _, c := range cycles {
		for id, s := range c {
			p, ok := out[id]
			if !ok || p.pid != s.pid {
				out[id] = s
				continue
			}
			p.rssKiB, p.threads, p.fds = max(p.rssKiB, s.rssKiB), max(p.threads, s.threads), max(p.fds, s.fds)
			out[id] = p
		}
	}
	return out
}

func describeSamples(m map[string]agentSample) string {
	parts := make([]string, 0, len(m))
	for id, s := range m {
		parts = append(parts, fmt.Sprintf("%s: %d KiB, %d threads, %d fds", id, s.rssKiB, s.threads, s.fds))
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}
