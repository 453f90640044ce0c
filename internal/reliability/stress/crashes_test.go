package stress

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// crashKind is what a crash trial kills, and what it runs next.
type crashKind int

const (
	// killProvisionThenRelease: provision killed, then the run's release (the workflow's
	// always-run release job), then refresh.
	killProvisionThenRelease crashKind = iota
	// killProvisionThenRefresh: provision killed, then refresh alone until the world is
	// consistent (what provision held expires), then the run's release.
	killProvisionThenRefresh
	// killRelease: a provisioned run's release killed, then refresh, then release again.
	killRelease
	// killRefresh: the refresh step killed while the function refreshes, then refresh again.
	killRefresh
	crashKinds
)

func (k crashKind) String() string {
	return [...]string{"kill provision, release, refresh", "kill provision, refresh, release", "kill release, refresh, release again",
		"kill refresh, refresh"}[k]
}

// Timeouts of the crash world's pool: short, so that what a killed step held expires within a
// trial.
const (
	crashCreated = 15 * time.Second
	crashClaimed = 10 * time.Second
)

// TestCrashes: the provision, release or refresh step is SIGKILLed at a random point (a seeded
// delay of 0–1.5 s after it starts, or the moment it reaches a phase seen from outside); then
// the run's release and refresh run as a workflow and the schedule would. The world converges:
// every instance EC2 runs has a live item that agrees with it, nothing stays claimed or created
// past its threshold; after one refresh no pool offer points at an instance that is not idle;
// a release after a killed provision gives everything back. The time from the kill to a
// consistent world is reported per trial, with the max.
func TestCrashes(t *testing.T) {
	t.Parallel()
	sc, seed := suite(t)
	t.Logf("TestCrashes (%s form): %d trials over a pool of %d idle instances (timeouts: created %s, claimed %s), base seed %d",
		sc.Form, sc.CrashTrials, sc.CrashIdle, crashCreated, crashClaimed, seed)
	w := newWorld(t, "crash", worldOptions{Refresh: true, Budget: 25 * time.Minute,
		Timeouts: pooldoc.Timeouts{Created: pooldoc.Duration(crashCreated), Claimed: pooldoc.Duration(crashClaimed)}})

	// Each trial is a subtest, so that one that fails does not hide the others: they run one
	// after the other in the same world, each from whatever the one before left.
	var converged []string
	var notes, failed []string
	var longest time.Duration
	midStep := 0
	start := time.Now()
	for trial := range sc.CrashTrials {
		ts := seed + uint64(trial)
		kind := crashKind(trial % int(crashKinds))
		name := fmt.Sprintf("trial %02d seed %d %s", trial, ts, kind)
		ok := t.Run(name, func(t *testing.T) {
			tr := &crashTrial{t: t, w: w, kind: kind, seed: ts, trial: trial,
				rng: rand.New(rand.NewPCG(ts, ts)), run: strconv.Itoa(200000 + 10*trial)}
			took, note := tr.play(sc.CrashIdle)
			converged = append(converged, fmt.Sprintf("%d:%s", trial, took.Round(100*time.Millisecond)))
			longest = max(longest, took)
			if tr.midStep {
				midStep++
			}
			if note != "" {
				notes = append(notes, fmt.Sprintf("trial %d (seed %d): %s", trial, ts, note))
			}
		})
		if !ok {
			failed = append(failed, fmt.Sprintf("%d (seed %d)", trial, ts))
		}
	}
	leaked, err := w.Leaked(w.ctx)
	require.NoError(t, err)
	require.Empty(t, leaked, "leaked instances after %d trials (base seed %d)", sc.CrashTrials, seed)
	for _, n := range notes {
		t.Logf("observed: %s", n)
	}
	if len(failed) > 0 {
		t.Logf("rerun a failed trial alone: HANGAR_RELIABILITY=%s HANGAR_RELIABILITY_SEED=%d go test -run 'TestCrashes/trial_<number>_' ./internal/reliability/stress/",
			sc.Form, seed)
	}
	t.Logf("TestCrashes (%s form) summary: %d trials (%d killed mid-step, the others had already exited; failed: %v), base seed %d, converged after (trial:time) %s, max %s; %s in all",
		sc.Form, sc.CrashTrials, midStep, failed, seed, strings.Join(converged, " "), longest.Round(100*time.Millisecond), since(start))
}

// crashTrial is one kill and what follows.
type crashTrial struct {
	t     *testing.T
	w     *world
	kind  crashKind
	seed  uint64
	trial int
	rng   *rand.Rand
	run   string
	// midStep says the kill landed while the step ran (not after it had exited).
	midStep bool
	// taken are the instances the run held from the pool when its release began.
	taken []string
}

func (tr *crashTrial) where() string {
	return fmt.Sprintf("seed %d, trial %d (%s)", tr.seed, tr.trial, tr.kind)
}

// play runs the trial and returns the time from the kill to a consistent world, and a note on
// anything worth reporting that is not a failure.
func (tr *crashTrial) play(idle int) (time.Duration, string) {
	w, t := tr.w, tr.t
	w.fill(t, strconv.Itoa(200000+10*tr.trial+9), idle)
	t.Cleanup(func() {
		if t.Failed() {
			tr.logAgents()
		}
	})
	var point string
	var killedAt time.Time
	var released []string // the instances of a killed release
	switch tr.kind {
	case killProvisionThenRelease, killProvisionThenRefresh:
		point, killedAt = tr.killProvision(idle)
		if tr.kind == killProvisionThenRelease {
			tr.releaseGivesAllBack("the release after the killed provision")
		}
	case killRelease:
		n := 1 + tr.rng.IntN(2)
		ctx, cancel := context.WithTimeout(w.ctx, 3*time.Minute)
		res, ids, err := w.provision(ctx, tr.run, n, "HANGAR_REGISTRATION_TIMEOUT=2m")
		cancel()
		require.NoError(t, err, "%s: the provision to release\n%s", tr.where(), tail(res.Log, 2000))
		point, killedAt = tr.killRelease(ids)
		released = ids
	case killRefresh:
		_, err := w.Launch(w.ctx, time.Now().Add(-time.Second)) // something for refresh to do: an expired warm instance
		require.NoError(t, err)
		point, killedAt = tr.killRefresh()
		// Lambda runs an invocation to its end whoever waits for it. The local Lambda does not:
		// it forgets an invocation whose caller hung up, refuses the function's late response,
		// and the function's runtime exits on that. Serve the function anew, as Lambda would
		// still be serving it.
		w.fn, err = w.ServeRefresh(w.refreshBin)
		require.NoError(t, err)
	}
	t.Logf("%s: killed at %s", tr.where(), point)

	took := tr.converge(killedAt)
	t.Logf("%s: consistent %s after the kill", tr.where(), took.Round(100*time.Millisecond))
	tr.offersPointAtIdle()
	var note string
	if lost := tr.idleNotOffered(released); len(lost) > 0 {
		note = fmt.Sprintf("the killed release had moved %v to idle; never offered, they are lost to the pool until their idle deadline", lost)
	}
	if tr.kind != killProvisionThenRelease && tr.kind != killRefresh {
		tr.releaseGivesAllBack("the release after the world converged")
	}
	return took, note
}

// killProvision starts a provision for the trial's run and kills it; it returns where. Killed by
// phase, it is killed the moment its first claim is written, or (asking for more than the pool
// holds) the moment its first instance is launched on EC2, before or while its items are written.
func (tr *crashTrial) killProvision(idle int) (string, time.Time) {
	w := tr.w
	mode := tr.rng.IntN(3) // 0: by delay, 1: at the first claim, 2: at the first launch
	n := 1 + tr.rng.IntN(3)
	switch mode {
	case 1:
		n = 1 + tr.rng.IntN(idle)
	case 2:
		n = idle + 1 + tr.rng.IntN(2) // more than the pool holds: it must launch
	}
	env, _ := w.stepEnv(tr.run, n, "HANGAR_REGISTRATION_TIMEOUT=2m")
	p := w.start(tr.t, w.provisionBin, env)
	what := fmt.Sprintf("provision of %d", n)
	if mode == 1 {
		return tr.kill(p, true, what, "its first claim was written", func(ctx context.Context) (bool, error) {
			held, err := w.Store.ByRun(ctx, tr.run)
			return len(held) > 0, err
		})
	}
	return tr.kill(p, mode == 2, what, "its first instance launched on EC2", func(ctx context.Context) (bool, error) {
		launched, err := w.launchedFor(ctx, tr.run)
		return len(launched) > 0, err
	})
}

// killRelease starts the run's release and kills it; it returns where.
func (tr *crashTrial) killRelease(ids []string) (string, time.Time) {
	w := tr.w
	env, _ := w.stepEnv(tr.run, 1)
	p := w.start(tr.t, w.releaseBin, env)
	return tr.kill(p, tr.rng.IntN(2) == 0, fmt.Sprintf("release of %d", len(ids)), "its first instance went idle", func(ctx context.Context) (bool, error) {
		its, err := w.items(ctx, ids)
		if err != nil {
			return false, err
		}
		for _, it := range its {
			if it.State != state.Running {
				return true, nil
			}
		}
		return false, nil
	})
}

// killRefresh starts the refresh step and kills it; it returns where.
func (tr *crashTrial) killRefresh() (string, time.Time) {
	w := tr.w
	before := w.fn.Invocations()
	env, _ := w.stepEnv("1", 1)
	p := w.start(tr.t, w.hangarBin, env, "refresh")
	return tr.kill(p, tr.rng.IntN(2) == 0, "refresh step", "the function was handed the invocation", func(context.Context) (bool, error) {
		return w.fn.Invocations() > before, nil
	})
}

// kill kills p after a seeded delay of 0–1.5 s, or (byPhase) the moment phase holds; it returns
// where it was killed and when.
func (tr *crashTrial) kill(p *proc, byPhase bool, what, phase string, reached func(context.Context) (bool, error)) (string, time.Time) {
	w := tr.w
	var point string
	if byPhase {
		ctx, cancel := context.WithTimeout(w.ctx, 2*time.Minute)
		defer cancel()
		for !p.exited() {
			ok, err := reached(ctx)
			require.NoError(tr.t, err, tr.where())
			if ok {
				break
			}
			select {
			case <-ctx.Done():
				require.FailNow(tr.t, "phase not reached", "%s: %s never reached %q\n%s", tr.where(), what, phase, tail(p.out.String(), 3000))
			case <-p.done:
			case <-time.After(100 * time.Millisecond):
			}
		}
		point = fmt.Sprintf("%s: when %s", what, phase)
	} else {
		d := time.Duration(tr.rng.Int64N(int64(1500 * time.Millisecond)))
		select {
		case <-time.After(d): // the seeded kill point itself, not a wait for a condition
		case <-p.done:
		}
		point = fmt.Sprintf("%s: %s after it started", what, d.Round(time.Millisecond))
	}
	if tr.midStep = p.kill(); !tr.midStep {
		point += fmt.Sprintf(" (it had already exited: %v)", p.err)
	}
	return point, time.Now()
}

// releaseGivesAllBack runs the run's release, which must succeed and leave nothing held by the
// run but the unrecorded instances no release can see. The instances the run had taken from the
// pool (claimed or running, their agents healthy) must be back in it, idle: only those still
// booting for the run are terminated.
func (tr *crashTrial) releaseGivesAllBack(what string) {
	w := tr.w
	ctx, cancel := context.WithTimeout(w.ctx, 4*time.Minute)
	defer cancel()
	before, err := w.Store.ByRun(ctx, tr.run)
	require.NoError(tr.t, err)
	var taken []string
	for _, in := range before {
		if in.State == state.Claimed || in.State == state.Running {
			taken = append(taken, in.ID)
		}
	}
	tr.taken = append(tr.taken, taken...)
	began := time.Now()
	res, err := w.release(ctx, tr.run)
	took := time.Since(began)
	require.NoError(tr.t, err, "%s: %s\n%s", tr.where(), what, tail(res.Log, 3000))
	held, orphans, err := w.heldBy(ctx, tr.run)
	require.NoError(tr.t, err)
	require.Empty(tr.t, held, "%s: %s left the run holding these\n%s", tr.where(), what, tail(res.Log, 3000))
	if len(orphans) > 0 {
		tr.t.Logf("%s: %s: unrecorded, left to their agents' boot wait: %v", tr.where(), what, orphans)
	}
	its, err := w.items(ctx, taken)
	require.NoError(tr.t, err)
	var lost []string
	for _, id := range taken {
		if it, ok := its[id]; !ok || it.State != state.Idle {
			lost = append(lost, id+": "+describe(it))
		}
	}
	require.Empty(tr.t, lost, "%s: %s (%s) did not give the run's instances back to the pool", tr.where(), what, took.Round(100*time.Millisecond))
}

// describe summarises an item for messages.
func describe(it *state.Instance) string {
	if it == nil {
		return "no item"
	}
	return fmt.Sprintf("%s, version %d, run %q, last run %q, signal %s for run %q, acknowledged version %d, heartbeat %s, updated %s, %q",
		it.State, it.Version, it.RunID, it.LastRunID, it.Signal, it.SignalRun, it.AckVersion,
		it.HeartbeatAt.UTC().Format(time.RFC3339Nano), it.UpdatedAt.UTC().Format(time.RFC3339Nano), it.StateReason)
}

// converge runs the refresh step until the world is consistent and returns the time from the
// kill.
func (tr *crashTrial) converge(killedAt time.Time) time.Duration {
	w := tr.w
	var last []string
	var took time.Duration
	err := localenv.Eventually(w.ctx, 3*time.Minute, "a consistent world", func(ctx context.Context) (bool, error) {
		refreshedAt := time.Now()
		if res, err := w.refresh(ctx); err != nil {
			last = []string{fmt.Sprintf("refresh failed: %v\n%s", err, tail(res.Log, 2000))}
			return false, nil
		}
		bad, err := w.inconsistencies(ctx, refreshedAt)
		if err != nil {
			return false, err
		}
		last, took = bad, time.Since(killedAt)
		return len(bad) == 0, nil
	})
	require.NoError(tr.t, err, "%s: still inconsistent:\n%s", tr.where(), strings.Join(last, "\n"))
	return took
}

// offersPointAtIdle waits until no claimer holds an offer (a killed provision's return after
// the visibility timeout), runs one refresh, and then requires every offer to point at an idle
// instance.
func (tr *crashTrial) offersPointAtIdle() {
	w := tr.w
	require.NoError(tr.t, localenv.Eventually(w.ctx, time.Minute, "no offer in flight", func(ctx context.Context) (bool, error) {
		n, err := w.inFlight(ctx)
		return n == 0, err
	}), tr.where())
	res, err := w.refresh(w.ctx)
	require.NoError(tr.t, err, "%s\n%s", tr.where(), tail(res.Log, 2000))
	offers, err := w.peekOffers(w.ctx)
	require.NoError(tr.t, err)
	bad, err := w.badOffers(w.ctx, offers)
	require.NoError(tr.t, err)
	require.Empty(tr.t, bad, "%s: after one refresh, offers point at instances that are not idle", tr.where())
}

// idleNotOffered returns those of ids that are idle without an offer.
func (tr *crashTrial) idleNotOffered(ids []string) []string {
	w := tr.w
	offers, err := w.peekOffers(w.ctx)
	require.NoError(tr.t, err)
	its, err := w.items(w.ctx, ids)
	require.NoError(tr.t, err)
	var lost []string
	for _, id := range ids {
		if it, ok := its[id]; ok && it.State == state.Idle &&
			!slices.ContainsFunc(offers, func(o offer) bool { return o.InstanceID == id && o.Version == it.Version }) {
			lost = append(lost, id)
		}
	}
	return lost
}

// logAgents writes the log tails of the agents of the instances the trial's run took or launched,
// and of those the pool offers.
func (tr *crashTrial) logAgents() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids := map[string]bool{}
	for _, id := range tr.taken {
		ids[id] = true
	}
	if launched, err := tr.w.launchedFor(ctx, tr.run); err == nil {
		for id := range launched {
			ids[id] = true
		}
	}
	if offers, err := tr.w.peekOffers(ctx); err == nil {
		for _, o := range offers {
			ids[o.InstanceID] = true
		}
	}
	for id := range ids {
		tr.t.Logf("%s: agent log of %s (tail):\n%s", tr.where(), id, tail(tr.w.Sim.AgentLog(id), 2500))
	}
}
