package stress

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/awsproxy"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// The faults the steps see: 5% of requests throttled and 5% answered with HTTP 500, each request
// delayed 20 ms plus up to 30 ms more.
var stepFaults = awsproxy.Faults{Throttle: 0.05, ServerError: 0.05, Latency: 20 * time.Millisecond, Jitter: 30 * time.Millisecond}

// Bounds of a faulted cycle: a provision registers within its registration timeout and both steps
// end within the step deadline.
const (
	faultRegistration = 2 * time.Minute
	faultStepDeadline = 3 * time.Minute
	// agentOutage is how long an agent is cut off from DynamoDB: a few seconds, far below its
	// self-termination grace (2 minutes past a deadline) and the claim's heartbeat freshness.
	agentOutage = 6 * time.Second
)

// TestFaults: with fault-injecting proxies in front of the AWS emulator (AWS_ENDPOINT_URL: EC2,
// SQS, SSM, KMS) and DynamoDB (AWS_ENDPOINT_URL_DYNAMODB) for the step binaries, 10% of requests
// failing (throttled or 5xx) and every request delayed, provision/release cycles still succeed
// within their deadlines: the SDK's retries ride the faults out. Then an agent rides out a
// DynamoDB outage shorter than its grace, idle and while serving a run: it serves the next
// provision normally and its instance lives on.
func TestFaults(t *testing.T) {
	t.Parallel()
	sc, seed := suite(t)
	t.Logf("TestFaults (%s form): %d provision/release cycles over %d idle instances through proxies injecting %.0f%% throttling, %.0f%% HTTP 500, %s + up to %s latency; agent outages of %s; base seed %d",
		sc.Form, sc.FaultCycles, sc.FaultIdle, 100*stepFaults.Throttle, 100*stepFaults.ServerError, stepFaults.Latency, stepFaults.Jitter, agentOutage, seed)
	w := newWorld(t, "faults", worldOptions{Budget: 20 * time.Minute})
	w.fill(t, "4000", sc.FaultIdle)

	awsProxy, err := awsproxy.New(os.Getenv("AWS_ENDPOINT_URL"), seed)
	require.NoError(t, err)
	t.Cleanup(awsProxy.Close)
	ddbProxy, err := awsproxy.New(w.dynamoDBEndpoint(), seed+1)
	require.NoError(t, err)
	t.Cleanup(ddbProxy.Close)
	through := []string{"AWS_ENDPOINT_URL=" + awsProxy.URL(), "AWS_ENDPOINT_URL_DYNAMODB=" + ddbProxy.URL()}

	t.Run("steps ride out throttling, 5xx and latency", func(t *testing.T) {
		awsProxy.SetFaults(stepFaults)
		ddbProxy.SetFaults(stepFaults)
		defer awsProxy.SetFaults(awsproxy.Faults{})
		defer ddbProxy.SetFaults(awsproxy.Faults{})
		start := time.Now()
		var slowest time.Duration
		for cycle := range sc.FaultCycles {
			cs := seed + uint64(cycle)
			where := fmt.Sprintf("seed %d, cycle %d", cs, cycle)
			rng := rand.New(rand.NewPCG(cs, cs))
			run := strconv.Itoa(400000 + cycle)
			n := 1 + rng.IntN(sc.FaultIdle)
			ctx, cancel := context.WithTimeout(w.ctx, faultStepDeadline)
			began := time.Now()
			res, ids, err := w.provision(ctx, run, n, append(through, "HANGAR_REGISTRATION_TIMEOUT="+faultRegistration.String())...)
			took := time.Since(began)
			cancel()
			require.NoError(t, err, "%s: provision of %d under faults\n%s", where, n, tail(res.Log, 4000))
			require.Len(t, ids, n, where)
			require.Less(t, took, faultRegistration, "%s: provision within its registration timeout", where)
			ctx, cancel = context.WithTimeout(w.ctx, faultStepDeadline)
			began = time.Now()
			rel, err := w.release(ctx, run, through...)
			cancel()
			require.NoError(t, err, "%s: release under faults\n%s", where, tail(rel.Log, 4000))
			slowest = max(slowest, took, time.Since(began))
			held, orphans, err := w.heldBy(w.ctx, run)
			require.NoError(t, err)
			require.Empty(t, append(held, orphans...), "%s: after the release", where)
			its, err := w.items(w.ctx, ids)
			require.NoError(t, err)
			for _, id := range ids {
				require.Equal(t, state.Idle, its[id].State, "%s: %s is back in the pool (%q)", where, id, its[id].StateReason)
			}
			if warnings := strings.Count(rel.Log, "::warning::") + strings.Count(res.Log, "::warning::"); warnings > 0 {
				t.Logf("%s: %d warnings under faults (provision %s, release)", where, warnings, took.Round(time.Millisecond))
			}
		}
		leaked, err := w.Leaked(w.ctx)
		require.NoError(t, err)
		require.Empty(t, leaked)
		awsInjected, ddbInjected := awsProxy.Injected(), ddbProxy.Injected()
		require.NotEmpty(t, awsInjected, "no fault injected in front of the AWS emulator: the steps did not go through the proxy")
		require.NotEmpty(t, ddbInjected, "no fault injected in front of DynamoDB: the steps did not go through the proxy")
		awsCalls, ddbCalls := awsProxy.Take(), ddbProxy.Take()
		t.Logf("TestFaults (%s form) summary: %d cycles in %s, slowest step %s; AWS emulator: %d requests, %d faults injected (%s); DynamoDB: %d requests, %d faults injected (%s)",
			sc.Form, sc.FaultCycles, since(start), slowest.Round(time.Millisecond), awsproxy.Sum(awsCalls), awsproxy.Sum(awsInjected), pairs(awsInjected),
			awsproxy.Sum(ddbCalls), awsproxy.Sum(ddbInjected), pairs(ddbInjected))
	})

	t.Run("an agent rides out a DynamoDB outage", func(t *testing.T) {
		// Offers a faulted provision held (a give-back refused by an injected fault keeps them
		// hidden until their visibility timeout) must be back, or a provision asking for every
		// idle instance would create instead.
		require.NoError(t, localenv.Eventually(w.ctx, time.Minute, "no offer in flight", func(ctx context.Context) (bool, error) {
			n, err := w.inFlight(ctx)
			return n == 0, err
		}))
		idle := w.inState(t, state.Idle)
		require.NotEmpty(t, idle)
		id := idle[0].ID
		all := len(idle)
		ctx, cancel := context.WithTimeout(w.ctx, 2*faultStepDeadline)
		defer cancel()

		// Idle: cut off as a provision claims it (and rings it); back after the outage, it
		// acknowledges and registers within the provision's bounds.
		var ids []string
		w.duringOutage(t, id, agentOutage, "a provision claiming it", func() error {
			res, got, err := w.provision(ctx, "410000", all, "HANGAR_REGISTRATION_TIMEOUT=2m")
			if err != nil {
				return fmt.Errorf("%w\n%s", err, tail(res.Log, 3000))
			}
			if ids = got; !slices.Contains(ids, id) {
				return fmt.Errorf("run 410000 was given %v, not %s (all %d idle instances were asked for)", ids, id, all)
			}
			return nil
		})
		// Serving: cut off as the run's release gives it back; back after the outage, it
		// deregisters and is offered again.
		w.duringOutage(t, id, agentOutage, "the release of the run it serves", func() error {
			if res, err := w.release(ctx, "410000"); err != nil {
				return fmt.Errorf("%w\n%s", err, tail(res.Log, 3000))
			}
			return nil
		})
		held, _, err := w.heldBy(ctx, "410000")
		require.NoError(t, err)
		require.Empty(t, held)
		it, err := w.Store.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, state.Idle, it.State, "%s, cut off while its run was released, is given back to the pool (%q)", id, it.StateReason)
		// And then it serves the next run as any other.
		w.mustProvision(t, "410001", all, id)
		rel, err := w.release(ctx, "410001")
		require.NoError(t, err, tail(rel.Log, 3000))

		st, err := w.InstanceState(ctx, id)
		require.NoError(t, err)
		require.True(t, live(st), "%s is %s: an outage shorter than the grace must not end the instance", id, st)
		it, err = w.Store.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, state.Idle, it.State)
		t.Logf("%s rode out two %s DynamoDB outages (claimed by run 410000 with %v, then released) and served run 410001", id, agentOutage, ids)
	})
}

// duringOutage cuts instance id's agent off from DynamoDB, runs step (which needs the agent) at
// once, brings DynamoDB back after d, and requires step to succeed.
func (w *world) duringOutage(t *testing.T, id string, d time.Duration, what string, step func() error) {
	t.Helper()
	require.NoError(t, w.Sim.SetDynamoDB(id, false))
	done := make(chan error, 1)
	go func() { done <- step() }()
	cut := time.NewTimer(d) // the outage's length: the scenario itself, not a wait for a condition
	var err error
	stepDone := false
	select {
	case <-cut.C:
	case err = <-done:
		stepDone = true
	}
	require.NoError(t, w.Sim.SetDynamoDB(id, true))
	if !stepDone {
		err = <-done
	}
	require.NoError(t, err, "%s, with the agent of %s cut off from DynamoDB for %s; agent log (tail):\n%s", what, id, d, tail(w.Sim.AgentLog(id), 3000))
	require.False(t, stepDone, "%s ended within the outage: the agent of %s cannot have taken part", what, id)
}

// mustProvision provisions n instances for run, which must succeed and include want.
func (w *world) mustProvision(t *testing.T, run string, n int, want string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(w.ctx, faultStepDeadline)
	defer cancel()
	res, ids, err := w.provision(ctx, run, n, "HANGAR_REGISTRATION_TIMEOUT=2m")
	require.NoError(t, err, "provision for run %s\n%s", run, tail(res.Log, 3000))
	require.True(t, slices.Contains(ids, want), "run %s was given %v, not %s (all %d idle instances were asked for)", run, ids, want, n)
	return ids
}

// dynamoDBEndpoint is the DynamoDB endpoint the world's state table is at.
func (w *world) dynamoDBEndpoint() string {
	env := w.Environ()
	for _, kv := range slices.Backward(env) {
		if v, ok := strings.CutPrefix(kv, "AWS_ENDPOINT_URL_DYNAMODB="); ok {
			return v
		}
	}
	return os.Getenv("AWS_ENDPOINT_URL_DYNAMODB")
}
