package provision_test

import (
	"context"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/provision"
	"github.com/hangar-ci/hangar/pkg/state"
	"github.com/hangar-ci/hangar/pkg/tokens"
)

// tokenSpy reads each instance's item, as any reader of the table could, just before provision
// moves it to running: the registration token is on it then, and only then.
type tokenSpy struct {
	provision.Store
	read func(ctx context.Context, id string) (*state.Instance, error) // the whole item, unprojected
	mu   sync.Mutex
	seen map[string]string // instance id → regToken as stored
}

func (s *tokenSpy) Transition(ctx context.Context, c state.Change) (*state.Instance, error) {
	s.look(ctx, c)
	return s.Store.Transition(ctx, c)
}

func (s *tokenSpy) TransitionAll(ctx context.Context, changes []state.Change, befores []state.Instance) []state.Written {
	for _, c := range changes {
		s.look(ctx, c)
	}
	return s.Store.TransitionAll(ctx, changes, befores)
}

// look records the token stored on an item about to move to running.
func (s *tokenSpy) look(ctx context.Context, c state.Change) {
	if c.To != state.Running {
		return
	}
	if it, err := s.read(ctx, c.InstanceID); err == nil {
		s.mu.Lock()
		s.seen[c.InstanceID] = it.RegToken
		s.mu.Unlock()
	}
}

// TestTokensSealedAndRemoved: the registration token on an item is ciphertext only its own
// instance can open (another instance's context is refused by KMS); no item holds a registration
// token once running. Release hands out no remove token: it mints none and deletes the runners
// itself, through the API.
func TestTokensSealedAndRemoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	warm := e.mustProvision("7931", 1) // one pooled instance: the next provision claims it and creates one
	e.release("7931")

	deps, err := e.w.Provision(e.ctx, e.Pool)
	require.NoError(t, err)
	db := e.DynamoDB()
	read := func(ctx context.Context, id string) (*state.Instance, error) {
		reader, err := state.NewAgent(db, e.Table, e.Store.Account().ARN(id), "")
		if err != nil {
			return nil, err
		}
		return reader.Get(ctx)
	}
	spy := &tokenSpy{Store: deps.Store, read: read, seen: map[string]string{}}
	deps.Store = spy
	res, err := provision.Run(e.ctx, e.config("7932", 2), deps)
	require.NoError(t, err)
	require.Equal(t, 1, res.Reused)
	require.Contains(t, ids(res), warm.Instances[0].ID)

	client := kms.NewFromConfig(e.AWS)
	account := e.Store.Account()
	require.Len(t, spy.seen, 2, "both the claimed and the created instance's items were read")
	for id, sealed := range spy.seen {
		require.NotEmpty(t, sealed, id)
		plain, err := tokens.Opener{KMS: client, Key: e.Doc.TokenKey, InstanceARN: account.ARN(id)}.Open(e.ctx, sealed)
		require.NoError(t, err, "its own instance opens it")
		require.NotEmpty(t, plain)
		require.NotContains(t, sealed, plain, "the item never holds the token in the clear")
		for other := range spy.seen {
			if other != id {
				_, err := tokens.Opener{KMS: client, Key: e.Doc.TokenKey, InstanceARN: account.ARN(other)}.Open(e.ctx, sealed)
				require.Error(t, err, "%s's token does not open with %s's context", id, other)
			}
		}
	}
	for id, it := range e.items(ids(res)) {
		require.Equal(t, state.Running, it.State, id)
		require.Empty(t, it.RegToken, "no registration token once running")
		require.True(t, it.RegTokenExpiresAt.IsZero())
	}

	rel := e.release("7932")
	require.Equal(t, 2, rel.RunnersDeleted, "release deleted both runners through the API")
	require.Empty(t, e.GH.Runners(""))
	require.Zero(t, e.GH.Minted("remove"), "no remove token was ever minted")
	offered := e.offered()
	for id, it := range e.items(ids(res)) {
		require.Equal(t, state.Idle, it.State, id)
		require.Equal(t, state.SignalDeregistered, it.Signal)
		require.Equal(t, 1, offered[id], "and offered")
	}
}
