package state_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

func TestReusable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		reuse  state.Reuse
		served []string
		repo   string
		want   bool
	}{
		{state.ReuseRepository, nil, "octo/a", true},
		{state.ReuseRepository, []string{"octo/a"}, "octo/a", true},
		{state.ReuseRepository, []string{"octo/a"}, "octo/b", false},
		{state.ReuseRepository, []string{"octo/a", "octo/b"}, "octo/a", false},
		{state.ReuseOwner, []string{"octo/a", "octo/b"}, "octo/c", true},
		{state.ReuseOwner, []string{"octo/a"}, "acme/a", false},
		{state.ReuseAny, []string{"octo/a"}, "acme/a", true},
		{state.ReuseNever, nil, "octo/a", true},
		{state.ReuseNever, []string{"octo/a"}, "octo/a", false},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, state.Reusable(tc.reuse, tc.served, tc.repo), "%s %v by %s", tc.reuse, tc.served, tc.repo)
	}
}

// TestClaimEnforcesReuse: the claim's condition, not only a selector, keeps an instance that
// served one repository from a run of another.
func TestClaimEnforcesReuse(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := testbed.Context(t, 30*time.Second)
	in := reach(t, s, state.Running, "81")
	idle, err := s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: in.Pool, From: state.Running, To: state.Idle,
		Version: in.Version, RunID: "81", Threshold: later(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, []string{"octo/app"}, idle.ServedRepos)

	other := assign("82")
	other.Repo = "acme/app"
	for _, reuse := range []state.Reuse{state.ReuseRepository, state.ReuseOwner, state.ReuseNever} {
		_, err = s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: in.Pool, From: state.Idle, To: state.Claimed,
			Version: idle.Version, Assign: other, Reuse: reuse, Threshold: later(time.Hour)})
		require.ErrorIs(t, err, state.ErrConflict, "reuse %s", reuse)
	}
	got, err := s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: in.Pool, From: state.Idle, To: state.Claimed,
		Version: idle.Version, Assign: other, Reuse: state.ReuseAny, Threshold: later(time.Hour)})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"octo/app", "acme/app"}, got.ServedRepos)
	require.ElementsMatch(t, []string{"octo", "acme"}, got.ServedOwners)
}

// TestClaimTreatsUnrecordedUseAsUsed: an item that served a run but carries no record of whom
// (written before servedRepos existed) is not fresh: only reuse any may claim it.
func TestClaimTreatsUnrecordedUseAsUsed(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := testbed.Context(t, 30*time.Second)
	in := reach(t, s, state.Running, "83")
	idle, err := s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: in.Pool, From: state.Running, To: state.Idle,
		Version: in.Version, RunID: "83", Threshold: later(time.Hour)})
	require.NoError(t, err)
	_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(s.Table()),
		Key:              map[string]types.AttributeValue{state.AttrARN: &types.AttributeValueMemberS{Value: idle.ARN}},
		UpdateExpression: aws.String("REMOVE servedRepos, servedOwners")})
	require.NoError(t, err)

	for _, reuse := range []state.Reuse{state.ReuseRepository, state.ReuseOwner, state.ReuseNever} {
		_, err = s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: in.Pool, From: state.Idle, To: state.Claimed,
			Version: idle.Version, Assign: assign("84"), Reuse: reuse, Threshold: later(time.Hour)})
		require.ErrorIs(t, err, state.ErrConflict, "reuse %s", reuse)
	}
	_, err = s.Transition(ctx, state.Change{InstanceID: in.ID, Pool: in.Pool, From: state.Idle, To: state.Claimed,
		Version: idle.Version, Assign: assign("84"), Reuse: state.ReuseAny, Threshold: later(time.Hour)})
	require.NoError(t, err)
}
