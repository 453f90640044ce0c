package stress

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// Bounds of the partition tests.
const (
	// selfTerminateGrace is the agents' --terminate-grace in the partition world (2 minutes by
	// default): how far past its deadline an agent cut off from DynamoDB ends its instance.
	selfTerminateGrace = time.Second
	// givenUpRegistration is the registration timeout of the provision whose agents never
	// answer (the shortest the step accepts).
	givenUpRegistration = 10 * time.Second
	// giveUpSlack is how long past its registration timeout the provision may take to give
	// back what it claimed.
	giveUpSlack = 30 * time.Second
	// exitBound bounds the failed provision's run: it gives back what it took with release's
	// mechanism, which waits up to release's default deregister-timeout (2 minutes) for agents
	// to deregister before terminating their instances (docs/design.md §6), plus slack.
	exitBound = givenUpRegistration + 2*time.Minute + 45*time.Second
)

// TestPartitions: an agent cut off from DynamoDB past its deadline terminates its instance by
// itself (warming, and serving a run); a provision whose agents never answer gives up at its
// bound, names the instances it gave up on, and leaves nothing held by its run. The three
// scenarios share one world and run at once (the last waits out more than two minutes of the
// product's timeouts).
func TestPartitions(t *testing.T) {
	t.Parallel()
	sc, _ := suite(t) // no random choice: no seed
	t.Logf("TestPartitions (%s form): self-termination with --terminate-grace %s; a provision with registration-timeout %s whose agents %s (gives up within %s, exits within %s)",
		sc.Form, selfTerminateGrace, givenUpRegistration, map[bool]string{true: "never come back", false: "come back once it has given up"}[sc.DeadAgentsStayDead],
		givenUpRegistration+giveUpSlack, exitBound)
	w := newWorld(t, "partition", worldOptions{AgentArgs: []string{"--terminate-grace", selfTerminateGrace.String()}})

	// Three idle instances, of which one then serves a run with a one-minute max-runtime.
	w.fill(t, "600000", 3)
	serving, servingDeadline := w.servingWithMaxRuntime(t, "500000")
	idle := slices.DeleteFunc(w.inState(t, state.Idle), func(in state.Instance) bool { return in.ID == serving })
	require.Len(t, idle, 2)

	scenarios := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"an agent cut off past its deadline terminates its instance/warming, past its created deadline", func(t *testing.T) {
			// Launched as refresh launches warm instances, with a deadline long enough for its
			// agent to boot and read it on a busy machine.
			deadline := time.Now().Add(45 * time.Second)
			id, err := w.Launch(w.ctx, deadline)
			require.NoError(t, err)
			_, err = w.WaitSignal(w.ctx, id, state.SignalReady, "", 1) // the agent has read its item, and so its deadline
			require.NoError(t, err)
			require.Greater(t, time.Until(deadline), 5*time.Second, "the warming instance must still be within its deadline when cut off")
			w.cutOffPastDeadline(t, id, deadline)
		}},
		{"an agent cut off past its deadline terminates its instance/serving a run, past its max-runtime", func(t *testing.T) {
			w.cutOffPastDeadline(t, serving, servingDeadline)
			// The run's release gives up on the dead instance and leaves nothing held.
			ctx, cancel := context.WithTimeout(w.ctx, 3*time.Minute)
			defer cancel()
			res, err := w.release(ctx, "500000", "HANGAR_DEREGISTER_TIMEOUT=10s")
			require.NoError(t, err, tail(res.Log, 3000))
			held, orphans, err := w.heldBy(ctx, "500000")
			require.NoError(t, err)
			require.Empty(t, append(held, orphans...), "after the release of the run whose instance ended\n%s", tail(res.Log, 3000))
		}},
		{"a provision whose agents never answer gives up at its bound", func(t *testing.T) {
			w.deadAgentsProvision(t, sc, idle, "600001")
		}},
	}
	// Not parallel subtests, which would queue for go test's parallelism: subtests run at once
	// from their own goroutines.
	var wg sync.WaitGroup
	for _, s := range scenarios {
		wg.Go(func() { t.Run(s.name, s.run) })
	}
	wg.Wait()
}

// servingWithMaxRuntime provisions one instance for run with a one-minute max-runtime and
// returns it and its deadline, once its agent has read that deadline.
func (w *world) servingWithMaxRuntime(t *testing.T, run string) (string, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(w.ctx, 3*time.Minute)
	defer cancel()
	res, ids, err := w.provision(ctx, run, 1, "HANGAR_MAX_RUNTIME=1m", "HANGAR_REGISTRATION_TIMEOUT=2m")
	require.NoError(t, err, tail(res.Log, 3000))
	it, err := w.Store.Get(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, state.Running, it.State)
	// The agent must have read the item since provision moved it to running, or the deadline it
	// keeps is the earlier one of the claim or the launch. Provision does not ring the doorbell
	// for that transition, and an agent with a doorbell reads unprompted only every 30 s: ring it,
	// as the control plane does after a write its agent waits for. It acknowledged and registered
	// before the transition, so its next requests are reads of its item, and any counted from now
	// on was sent after the transition.
	seen := w.Sim.RequestCount(ids[0])
	require.NoError(t, w.Ring(ctx, it))
	require.NoError(t, localenv.Eventually(ctx, 2*time.Minute, "the agent reading its running item", func(context.Context) (bool, error) {
		return w.Sim.RequestCount(ids[0]) > seen, nil
	}))
	return ids[0], it.Threshold
}

// cutOffPastDeadline cuts instance id's agent off from DynamoDB and requires the instance to end
// by the agent's own hand, past deadline and its grace.
func (w *world) cutOffPastDeadline(t *testing.T, id string, deadline time.Time) {
	require.NoError(t, w.Sim.SetDynamoDB(id, false))
	before, err := w.Store.Get(w.ctx, id)
	require.NoError(t, err)
	within := time.Until(deadline) + selfTerminateGrace + time.Minute
	require.NoError(t, localenv.Eventually(w.ctx, within, id+" terminated by its agent", func(ctx context.Context) (bool, error) {
		st, err := w.InstanceState(ctx, id)
		return ending(st), err
	}), "agent log (tail):\n%s", tail(w.Sim.AgentLog(id), 3000))
	ended := time.Now()
	require.False(t, ended.Before(deadline.Add(selfTerminateGrace)), "%s ended at %s, before its deadline %s + grace", id, ended, deadline)
	// Nobody else ended it: its item is as it was when the agent was cut off (no refresh runs in
	// this world, and the agent could not write).
	after, err := w.Store.Get(w.ctx, id)
	require.NoError(t, err)
	require.Equal(t, before.State, after.State)
	require.Equal(t, before.Version, after.Version)
	t.Logf("%s (%s) ended %s after its deadline", id, after.State, ended.Sub(deadline).Round(100*time.Millisecond))
}

// deadAgentsProvision cuts the agents of idle off from DynamoDB and runs a provision for run that
// asks for all of them with the shortest registration timeout: it must give its claims back at
// that timeout, exit non-zero within its bound, name the instances, and leave nothing held. In
// the short form the agents come back once the claims are given back.
func (w *world) deadAgentsProvision(t *testing.T, sc scale, idle []state.Instance, run string) {
	var cut []string
	for _, in := range idle {
		cut = append(cut, in.ID)
		require.NoError(t, w.Sim.SetDynamoDB(in.ID, false))
	}
	ctx, cancel := context.WithTimeout(w.ctx, exitBound+time.Minute)
	defer cancel()

	// Watch for the give-up: the claimed instances leave the run.
	start := time.Now()
	gaveBack := make(chan time.Duration, 1)
	go func() {
		defer close(gaveBack)
		err := localenv.Eventually(ctx, exitBound, "provision giving back what it claimed", func(ctx context.Context) (bool, error) {
			its, err := w.items(ctx, cut)
			if err != nil {
				return false, err
			}
			for _, it := range its {
				// Given back: the run is gone from the item, which says who let it go (a claim
				// given back unacknowledged keeps the instance's last run).
				back := it.RunID == "" && (it.LastRunID == run || strings.Contains(it.StateReason, "run "+run))
				if !back {
					return false, nil // not claimed yet, or not given back yet
				}
			}
			return len(its) == len(cut), nil
		})
		if err == nil {
			gaveBack <- time.Since(start)
		}
		if !sc.DeadAgentsStayDead {
			for _, id := range cut {
				_ = w.Sim.SetDynamoDB(id, true)
			}
		}
	}()
	res, _, failed := w.provision(ctx, run, len(cut), "HANGAR_REGISTRATION_TIMEOUT="+givenUpRegistration.String())
	took := time.Since(start)
	var exit *exec.ExitError
	require.True(t, errors.As(failed, &exit), "provision must fail: %v\n%s", failed, tail(res.Log, 3000))
	require.NotZero(t, exit.ExitCode())
	back, ok := <-gaveBack
	require.True(t, ok, "provision never gave its claims back\n%s", tail(res.Log, 3000))
	require.GreaterOrEqual(t, back, givenUpRegistration, "provision gave up before its registration timeout\n%s", tail(res.Log, 3000))
	require.Less(t, back, givenUpRegistration+giveUpSlack, "provision gave up past its registration timeout\n%s", tail(res.Log, 3000))
	require.Less(t, took, exitBound, "provision exited past its bound\n%s", tail(res.Log, 3000))

	// It names the instances it gave up on.
	for _, id := range cut {
		require.Contains(t, res.Summary, id, "the step summary names %s, given up on", id)
	}
	held, orphans, err := w.heldBy(w.ctx, run)
	require.NoError(t, err)
	require.Empty(t, append(held, orphans...), "after the failed provision\n%s", tail(res.Log, 3000))
	// What it created is terminated; what it claimed is back in the pool or terminated.
	launched, err := w.launchedFor(w.ctx, run)
	require.NoError(t, err)
	for id, x := range launched {
		require.True(t, ending(x.state), "%s, created by the failed provision, is %s", id, x.state)
	}
	its, err := w.items(w.ctx, cut)
	require.NoError(t, err)
	var fate []string
	for _, id := range cut {
		it := its[id]
		require.Contains(t, []state.State{state.Idle, state.Terminated}, it.State, "%s, claimed by the failed provision (%q)", id, it.StateReason)
		fate = append(fate, fmt.Sprintf("%s %s (%q)", id, it.State, it.StateReason))
	}
	t.Logf("provision gave its claims back %s after it started and exited (code %d) after %s (bounds %s and %s): %s; %s",
		back.Round(100*time.Millisecond), exit.ExitCode(), took.Round(100*time.Millisecond), givenUpRegistration+giveUpSlack, exitBound,
		strings.Join(fate, ", "), firstLine(failed))
}
