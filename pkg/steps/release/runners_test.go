package release_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
)

// watchRemoveToken reads the items of ids as stored (every attribute, not a control-plane read)
// until stop is called, and reports whether any ever carried a remove token.
func (e *env) watchRemoveToken(ids ...string) (stop func() bool) {
	db := dynamodb.NewFromConfig(e.AWS)
	ctx, cancel := context.WithCancel(e.ctx)
	var seen atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			for _, id := range ids {
				out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.Store.Table()), ConsistentRead: aws.Bool(true),
					Key: map[string]types.AttributeValue{state.AttrARN: &types.AttributeValueMemberS{Value: e.Store.Account().ARN(id)}}})
				if err == nil {
					if _, ok := out.Item["removeToken"]; ok {
						seen.Store(true)
					}
				}
			}
		}
	}()
	return func() bool {
		cancel()
		<-done
		return seen.Load()
	}
}

// TestNoRemoveTokenReachesAnInstance: a full cycle on the fleet simulator. The release hands the
// instance no remove token (none is minted, the item never carries one); its agent stops the
// runner and signals DEREGISTERED, and release deletes the run's runner through the API. Another
// run's runner, and its instance, are untouched.
func TestNoRemoveTokenReachesAnInstance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mine, other := e.running("9501"), e.running("9502")
	mineName, otherName := e.RunnerNames().Name(mine.ID, "9501"), e.RunnerNames().Name(other.ID, "9502")
	require.ElementsMatch(t, []string{mineName, otherName}, runnerNames(e.GH.Runners(localenv.Repo)))

	stop := e.watchRemoveToken(mine.ID)
	res := e.release("9501", time.Minute)
	require.False(t, stop(), "the item never carried a remove token")

	require.Zero(t, e.GH.Minted("remove"), "no remove token was minted")
	require.Len(t, res.Instances, 1)
	require.Equal(t, pool.Returned, res.Instances[0].Result, "%+v", res.Instances[0])
	require.Equal(t, 1, res.RunnersDeleted, "the run's runner is deleted through the API")
	require.Empty(t, res.Warnings)
	require.Equal(t, []string{otherName}, runnerNames(e.GH.Runners(localenv.Repo)), "the run's runner is gone, the other run's stays")

	back, err := e.Store.Get(e.ctx, mine.ID)
	require.NoError(t, err)
	require.Equal(t, state.Idle, back.State)
	require.True(t, back.SignalFor(state.SignalDeregistered, "9501", back.Version), "its agent stopped the runner: %s", back.SignalLog)
	kept, err := e.Store.Get(e.ctx, other.ID)
	require.NoError(t, err)
	require.Equal(t, state.Running, kept.State)
	require.Equal(t, "9502", kept.RunID)
	offered, err := e.Offered(e.ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{mine.ID: 1}, offered)
}

// TestReleaseRemovesLeftovers: provisions killed mid-way left this stack's runners registered,
// offline: one whose instance has no item, one whose instance is terminated, one whose instance
// was given back (idle, no run). The next release in the repository, of another run, deletes
// them; it keeps an offline runner whose instance still holds its run (claimed, its runner yet
// to come online), a busy one, a live run's online runner, and another stack's.
func TestReleaseRemovesLeftovers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	names := e.RunnerNames()
	live := e.running("9601") // online: kept

	gone := e.launchOnly()
	_, err := e.Transition(e.ctx, state.Change{InstanceID: gone.ID, From: gone.State, To: state.Terminated, Version: gone.Version})
	require.NoError(t, err)
	given := e.idle()
	claimed := e.idle()
	require.NoError(t, e.Sim.SetDynamoDB(claimed.ID, false)) // its agent has not noticed the claim yet
	claimed, err = e.Claim(e.ctx, claimed, "9603")
	require.NoError(t, err)

	repo := ghfake.Scope(localenv.Repo)
	leftovers := []string{
		names.Name("i-0123456789abcdef0", "9602"), // no item
		names.Name(gone.ID, "9602"),               // terminated
		names.Name(given.ID, "9602"),              // idle: no longer holds the run
	}
	for _, n := range leftovers {
		e.GH.AddRunner(repo, n, "9602")
	}
	kept := []string{
		names.Name(live.ID, "9601"),
		names.Name(claimed.ID, "9603"), // its instance still holds the run
		names.Name("i-0123456789abcdef1", "9604"),
		state.RunnerNamesOf("other-stack").Name("i-0123456789abcdef2", "9602"),
	}
	e.GH.AddRunner(repo, kept[1], "9603")
	busy := e.GH.AddRunner(repo, kept[2], "9604")
	e.GH.SetBusy(busy, true)
	e.GH.AddRunner(repo, kept[3], "9602")

	res := e.release("9605", time.Minute) // a run with no instances left
	require.Empty(t, res.Instances)
	require.Empty(t, res.Warnings)
	require.Equal(t, len(leftovers), res.LeftoversDeleted)
	left := runnerNames(e.GH.Runners(localenv.Repo))
	require.ElementsMatch(t, kept, left, "only the leftovers are deleted")
}

func runnerNames(rs []ghfake.Runner) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Name)
	}
	return out
}

// launchOnly launches an instance and returns its item (created).
func (e *env) launchOnly() *state.Instance {
	e.t.Helper()
	id, err := e.Launch(e.ctx, time.Time{})
	require.NoError(e.t, err)
	in, err := e.Store.Get(e.ctx, id)
	require.NoError(e.t, err)
	return in
}

// idle brings up an idle instance.
func (e *env) idle() *state.Instance {
	e.t.Helper()
	id, err := e.Launch(e.ctx, time.Time{})
	require.NoError(e.t, err)
	in, err := e.Warm(e.ctx, id)
	require.NoError(e.t, err)
	return in
}
