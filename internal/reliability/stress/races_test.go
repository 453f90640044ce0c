package stress

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// raceOutcome is one provision of a round.
type raceOutcome struct {
	run  string
	n    int
	ids  []string
	err  error
	log  string
	took time.Duration
}

// TestRaces: concurrent provisions of 1–3 instances each over a pool of idle instances, round
// after round. No instance is ever given to two provisions; the items, the GitHub stand-in's
// runners and their labels agree; a provision that fails leaves nothing held once its run is
// released; after every release the pool offers each idle instance exactly once and every item is
// idle.
func TestRaces(t *testing.T) {
	t.Parallel()
	sc, seed := suite(t)
	t.Logf("TestRaces (%s form): %d concurrent provisions of 1–3 instances over %d idle instances, %d rounds, base seed %d",
		sc.Form, sc.RaceProvisions, sc.RaceIdle, sc.RaceRounds, seed)
	w := newWorld(t, "races", worldOptions{Budget: 25 * time.Minute})
	w.fill(t, "1000", sc.RaceIdle)

	var provisions, failed int
	var slowest time.Duration
	start := time.Now()
	for round := range sc.RaceRounds {
		rs := seed + uint64(round)
		where := fmt.Sprintf("seed %d, round %d", rs, round)
		rng := rand.New(rand.NewPCG(rs, rs))
		counts := raceCounts(rng, sc.RaceProvisions, sc.RaceIdle)
		roundStart := time.Now()
		outs := w.race(round, counts)

		// No instance is given to two provisions, and every provision got what it asked for or
		// failed.
		owner := map[string]string{}
		var problems []string
		for _, o := range outs {
			provisions++
			slowest = max(slowest, o.took)
			if o.err != nil {
				failed++
				t.Logf("%s: provision of %d for run %s failed after %s (allowed if clean, checked below): %v\n%s",
					where, o.n, o.run, o.took.Round(time.Millisecond), firstLine(o.err), tail(o.log, 2000))
				continue
			}
			if len(o.ids) != o.n {
				problems = append(problems, fmt.Sprintf("run %s asked for %d instances and was given %d: %v", o.run, o.n, len(o.ids), o.ids))
			}
			for _, id := range o.ids {
				if prev, dup := owner[id]; dup {
					problems = append(problems, fmt.Sprintf("double claim: %s given to runs %s and %s", id, prev, o.run))
				}
				owner[id] = o.run
			}
		}
		require.Empty(t, problems, "%s", where)

		// The items hold what the provisions were told they have; the runners agree.
		ids := make([]string, 0, len(owner))
		for id := range owner {
			ids = append(ids, id)
		}
		its, err := w.items(w.ctx, ids)
		require.NoError(t, err)
		for id, run := range owner {
			it, ok := its[id]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s (run %s) has no item", id, run))
				continue
			}
			if it.State != state.Running || it.RunID != run {
				problems = append(problems, fmt.Sprintf("%s was given to run %s but its item is %s for run %q", id, run, it.State, it.RunID))
			}
		}
		bad, err := w.runnerProblems(w.ctx)
		require.NoError(t, err)
		problems = append(problems, bad...)
		perRun := map[string]int{}
		for _, r := range w.GH.Runners("") {
			if _, run, ok := w.RunnerNames().Parse(r.Name); ok {
				perRun[run]++
			}
		}
		for _, o := range outs {
			if o.err == nil && perRun[o.run] != o.n {
				problems = append(problems, fmt.Sprintf("run %s holds %d instances but has %d runners", o.run, o.n, perRun[o.run]))
			}
		}
		require.Empty(t, problems, "%s", where)

		// Every run is released, concurrently; then nothing holds any of them, failed or not.
		w.releaseAll(t, where, outs)
		runs := make([]string, len(outs))
		for i, o := range outs {
			runs[i] = o.run
		}
		held, orphans, err := w.heldByRuns(w.ctx, runs)
		require.NoError(t, err)
		require.Empty(t, append(held, orphans...), "%s: after the release of every run", where)
		its, err = w.items(w.ctx, ids)
		require.NoError(t, err)
		for id, run := range owner {
			it, ok := its[id]
			require.True(t, ok && it.State == state.Idle, "%s: %s, released by run %s, is back in the pool: %+v", where, id, run, it)
		}
		// The pool offers each idle instance exactly once (peeked at, not hidden: the next round
		// claims them).
		idle := w.inState(t, state.Idle)
		offers, err := w.peekOffers(w.ctx)
		require.NoError(t, err)
		require.Empty(t, offerProblems(idle, offers), "%s: the pool's offers after the release of every run", where)
		t.Logf("%s: %d provisions (%v) done and released in %s; %d idle instances now", where, len(counts), counts, since(roundStart), len(idle))
	}

	// After releasing everything, the pool offers each idle instance exactly once (localenv's
	// count, which hides the offers: the world's last look), and every item of an instance EC2
	// runs is idle.
	idle := w.inState(t, state.Idle)
	offered, err := w.Offered(w.ctx)
	require.NoError(t, err)
	problems := offerCountProblems(idle, offered)
	idleIDs := map[string]bool{}
	for _, in := range idle {
		idleIDs[in.ID] = true
	}
	insts, err := w.ec2Instances(w.ctx)
	require.NoError(t, err)
	for id, x := range insts {
		if live(x.state) && !idleIDs[id] {
			problems = append(problems, fmt.Sprintf("%s runs on EC2 (%s) but its item is not idle", id, x.state))
		}
	}
	leaked, err := w.Leaked(w.ctx)
	require.NoError(t, err)
	require.Empty(t, leaked, "leaked instances")
	require.Empty(t, problems, "after %d rounds (base seed %d)", sc.RaceRounds, seed)
	t.Logf("TestRaces (%s form) summary: %d rounds, %d provisions (%d failed cleanly), pool %d → %d idle instances, slowest provision %s, %s in all",
		sc.Form, sc.RaceRounds, provisions, failed, sc.RaceIdle, len(idle), slowest.Round(time.Millisecond), since(start))
}

// raceCounts draws n provision sizes of 1–3 whose sum is at most idle: the round contends for the
// offers the pool holds, and a provision creates only when a claim comes up short (offers held by
// other claimers at that moment).
func raceCounts(rng *rand.Rand, n, idle int) []int {
	counts := make([]int, n)
	sum := 0
	for i := range counts {
		counts[i] = 1 + rng.IntN(3)
		sum += counts[i]
	}
	for i := 0; sum > idle && i < 3*n; i++ {
		if j := i % n; counts[j] > 1 {
			counts[j]--
			sum--
		}
	}
	return counts
}

// race runs one provision per count at once, each for its own run.
func (w *world) race(round int, counts []int) []raceOutcome {
	outs := make([]raceOutcome, len(counts))
	var wg sync.WaitGroup
	for i, n := range counts {
		run := strconv.Itoa(100000 + 1000*round + i)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(w.ctx, 5*time.Minute)
			defer cancel()
			start := time.Now()
			res, ids, err := w.provision(ctx, run, n, "HANGAR_REGISTRATION_TIMEOUT=3m")
			outs[i] = raceOutcome{run: run, n: n, ids: ids, err: err, log: res.Log, took: time.Since(start)}
		})
	}
	wg.Wait()
	return outs
}

// releaseAll releases every run of outs at once; each release must succeed.
func (w *world) releaseAll(t *testing.T, where string, outs []raceOutcome) {
	errs := make([]error, len(outs))
	var wg sync.WaitGroup
	for i, o := range outs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(w.ctx, 4*time.Minute)
			defer cancel()
			if res, err := w.release(ctx, o.run); err != nil {
				errs[i] = fmt.Errorf("release of run %s: %w\n%s", o.run, err, tail(res.Log, 2000))
			}
		})
	}
	wg.Wait()
	errs = slices.DeleteFunc(errs, func(err error) bool { return err == nil })
	require.Empty(t, errs, "%s", where)
}

// firstLine is an error's first line.
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// offerProblems checks peeked offers against the idle instances: each offered exactly once, at
// its current version, and no other offer.
func offerProblems(idle []state.Instance, offers []offer) []string {
	counts := map[string]int{}
	version := map[string]int64{}
	for _, in := range idle {
		version[in.ID] = in.Version
	}
	var bad []string
	for _, o := range offers {
		counts[o.InstanceID]++
		if v, ok := version[o.InstanceID]; ok && v != o.Version {
			bad = append(bad, fmt.Sprintf("offer of idle instance %s is stale: version %d, the item's is %d", o.InstanceID, o.Version, v))
		}
	}
	return append(bad, offerCountProblems(idle, counts)...)
}

// offerCountProblems checks offer counts by instance against the idle instances: each offered
// exactly once, nothing else offered.
func offerCountProblems(idle []state.Instance, offered map[string]int) []string {
	idleIDs := map[string]bool{}
	var bad []string
	for _, in := range idle {
		idleIDs[in.ID] = true
		if offered[in.ID] != 1 {
			bad = append(bad, fmt.Sprintf("idle instance %s is offered %d times", in.ID, offered[in.ID]))
		}
	}
	for id, n := range offered {
		if !idleIDs[id] {
			bad = append(bad, fmt.Sprintf("%s is offered %d times but is not idle", id, n))
		}
	}
	slices.Sort(bad)
	return bad
}
