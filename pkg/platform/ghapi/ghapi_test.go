package ghapi_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
)

func TestParseScope(t *testing.T) {
	t.Parallel()
	s, err := ghapi.ParseScope("octo/app", "repo")
	require.NoError(t, err)
	require.Equal(t, "https://github.com/octo/app", s.RunnerURL("https://github.com/"))
	s, err = ghapi.ParseScope("octo/app", "org")
	require.NoError(t, err)
	require.Equal(t, "octo", s.String())
	for _, bad := range []struct{ repo, kind, want string }{
		{"octo", "repo", `repository "octo": want owner/name`},
		{"-octo/app", "repo", "want owner/name"},
		{"octo/app", "enterprise", `runner-scope "enterprise"`},
	} {
		_, err := ghapi.ParseScope(bad.repo, bad.kind)
		require.ErrorContains(t, err, bad.want)
	}
	_, err = ghapi.ParseScope("octo/app", "team")
	require.ErrorIs(t, err, ghapi.ErrScopeKind)
}

// TestErrorClasses: the answers callers tell apart are classified by status, wrapped or not; a
// rate limit, a server error and no answer at all are worth asking again, a refusal is not.
func TestErrorClasses(t *testing.T) {
	t.Parallel()
	answer := func(status int, limited bool) error {
		return fmt.Errorf("delete runner 7 of octo/app: %w", &ghapi.Error{Status: status, RateLimited: limited, Err: errors.New("answer")})
	}
	require.True(t, ghapi.IsNotFound(answer(404, false)))
	require.True(t, ghapi.IsBusy(answer(422, false)))
	require.True(t, ghapi.IsConflict(answer(409, false)))
	require.True(t, ghapi.IsUnauthorized(answer(401, false)))
	require.False(t, ghapi.IsNotFound(answer(403, false)))
	for _, tc := range []struct {
		err   error
		retry bool
	}{
		{answer(403, true), true}, {answer(429, false), true}, {answer(502, false), true},
		{errors.New("dial tcp: connection refused"), true},
		{answer(403, false), false}, {answer(404, false), false}, {answer(422, false), false}, {nil, false},
	} {
		require.Equal(t, tc.retry, ghapi.IsRetryable(tc.err), "%v", tc.err)
	}
	// An App refused is one someone must mend: never a rate limit, a server error or the network.
	for _, tc := range []struct {
		err     error
		refused bool
	}{
		{fmt.Errorf("check: %w", ghapi.ErrAppRefused), true}, {answer(401, false), true}, {answer(403, false), true},
		{answer(403, true), false}, {answer(502, false), false}, {errors.New("dial tcp: connection refused"), false}, {nil, false},
	} {
		require.Equal(t, tc.refused, ghapi.IsAppRefused(tc.err), "%v", tc.err)
	}
}
