package provision_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// TestCapacityFallback: with no capacity for one type anywhere and another in one zone, the
// instances come from what is left, in the same request.
func TestCapacityFallback(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	az0 := e.Doc.Subnets[0].AZ
	e.ec2.setNoCapacity("c7i.large/*", "c6i.large/"+az0)
	res := e.mustProvision("7201", 3)
	for _, x := range res.Instances {
		require.NotEqual(t, "c7i.large", x.Type, "no c7i capacity anywhere")
		require.False(t, x.Type == "c6i.large" && x.AZ == az0, "no c6i capacity in %s", az0)
	}
	require.Equal(t, int64(1), e.ec2.Calls("CreateFleet"), "EC2 Fleet falls back across overrides within one request")
	e.release("7201")
}

// TestNoCapacityAnywhere: with no capacity at all, provision fails with a clear message when
// its deadline comes, and nothing is left behind.
func TestNoCapacityAnywhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	e.ec2.setNoCapacity("*")
	cfg := e.config("7301", 2)
	cfg.RegistrationTimeout = 12 * time.Second
	start := time.Now()
	_, err := e.provision(cfg)
	require.Error(t, err)
	require.ErrorIs(t, err, fleet.ErrNoCapacity)
	require.Contains(t, err.Error(), "InsufficientInstanceCapacity")
	require.Less(t, time.Since(start), 20*time.Second, "gives up at its deadline")
	require.Greater(t, e.ec2.Calls("CreateFleet"), int64(1), "retried with backoff before giving up")
	require.Empty(t, e.liveInstances(), "nothing launched, nothing leaked")
	left, err := e.Store.ByRun(e.ctx, "7301")
	require.NoError(t, err)
	require.Empty(t, left)
}

// TestSpotFallsBackToOnDemand: a spot-fallback pool with no spot capacity gets on-demand.
func TestSpotFallsBackToOnDemand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{Market: "spot-fallback"})
	e.ec2.setNoCapacity() // capacity everywhere, but...
	e.ec2.spotOut = true  // ...none for spot
	res := e.mustProvision("7351", 2)
	for _, x := range res.Instances {
		require.Equal(t, state.UsageOnDemand, x.UsageClass)
	}
	e.release("7351")
}

// TestPartialFulfilment: a fleet that launches fewer than asked keeps what it got and asks again
// for the rest.
func TestPartialFulfilment(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	e.ec2.partial = 1
	res := e.mustProvision("7401", 3)
	require.Equal(t, 3, res.Created)
	require.Equal(t, int64(2), e.ec2.Calls("CreateFleet"), "one more request for the missing two")
	e.release("7401")
}

// TestRegistrationFailureReplaced: a pooled instance that cannot register goes back to the pool
// and a new instance replaces it.
func TestRegistrationFailureReplaced(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	first := e.mustProvision("7501", 1)
	e.release("7501")
	bad := first.Instances[0].ID
	e.GH.RefuseRunners(e.RunnerNames().Prefix() + bad)

	res := e.mustProvision("7502", 1)
	require.Equal(t, 1, res.Replaced)
	require.Equal(t, 1, res.Created)
	require.NotEqual(t, bad, res.Instances[0].ID)
	require.True(t, strings.Contains(strings.Join(res.Warnings, "\n"), "could not register"), "%v", res.Warnings)
	it := e.items([]string{bad})[bad]
	require.Equal(t, state.Idle, it.State, "an instance that failed to register once goes back to the pool")
	require.Equal(t, 1, it.RegisterFailures, "the failure is counted")
	e.release("7502")

	// Both pooled instances are claimed; the bad one fails a second time in a row and is
	// terminated, not offered again.
	res = e.mustProvision("7503", 2)
	require.Equal(t, 1, res.Replaced)
	it = e.items([]string{bad})[bad]
	require.Equal(t, state.Terminated, it.State, "a twice-failing instance is terminated")
	require.Contains(t, it.StateReason, "2 registrations in a row failed")
	st, err := e.InstanceState(e.ctx, bad)
	require.NoError(t, err)
	require.Contains(t, []ec2types.InstanceStateName{ec2types.InstanceStateNameShuttingDown, ec2types.InstanceStateNameTerminated}, st)
	require.Zero(t, e.offered()[bad], "never offered again")
	for _, in := range res.Instances {
		require.Zero(t, e.items([]string{in.ID})[in.ID].RegisterFailures, "a registered runner resets the count")
	}
	e.release("7503")
}

// TestRacingProvisions: 10 provisions race over 15 pooled instances; no instance serves two runs
// and every provision gets what it asked for.
func TestRacingProvisions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	cfg := e.config("7600", 15)
	cfg.RegistrationTimeout = 2 * time.Minute
	_, err := e.provision(cfg)
	require.NoError(t, err)
	e.release("7600")

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		owner = map[string]string{}
		errs  []error
		total int
	)
	for i := range 10 {
		run := fmt.Sprint(7601 + i)
		n := 1 + i%3
		total += n
		wg.Go(func() {
			cfg := e.config(run, n)
			cfg.RegistrationTimeout = 2 * time.Minute
			res, err := e.provision(cfg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("run %s: %w", run, err))
				return
			}
			if len(res.Instances) != n {
				errs = append(errs, fmt.Errorf("run %s got %d of %d", run, len(res.Instances), n))
			}
			for _, x := range res.Instances {
				if prev, dup := owner[x.ID]; dup {
					errs = append(errs, fmt.Errorf("%s given to runs %s and %s", x.ID, prev, run))
				}
				owner[x.ID] = run
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Len(t, owner, total)
	for id, it := range e.items(keys(owner)) {
		require.Equal(t, owner[id], it.RunID, "%s is held by the run that was told it has it", id)
		require.Equal(t, state.Running, it.State)
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
