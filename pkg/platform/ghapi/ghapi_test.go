package ghapi_test

import (
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
