package ghapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
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
	_, err = ghapi.New("not a url", "t", s)
	require.ErrorContains(t, err, "GitHub API URL")
	_, err = ghapi.ParseScope("octo/app", "team")
	require.ErrorIs(t, err, ghapi.ErrScopeKind)
}

// TestClient: tokens, listing every page, deleting, for a repository and an organisation, and a
// bad credential's error naming the scope.
func TestClient(t *testing.T) {
	t.Parallel()
	gh := ghfake.New("admin")
	defer gh.Close()
	gh.SetPageSize(2)
	for _, kind := range []string{"repo", "org"} {
		scope, err := ghapi.ParseScope("octo/app", kind)
		require.NoError(t, err)
		c, err := ghapi.New(gh.URL(), "admin", scope)
		require.NoError(t, err)
		reg, err := c.RegistrationToken(t.Context())
		require.NoError(t, err)
		require.NotEmpty(t, reg.Value)

		for i := range 5 { // as the runner's config.sh would
			body, _ := json.Marshal(ghfake.RegisterRequest{URL: scope.RunnerURL(gh.URL()), Token: reg.Value, Name: fmt.Sprintf("r%d", i), Labels: []string{"42"}})
			resp, err := http.Post(gh.URL()+"/_fake/register", "application/json", bytes.NewReader(body))
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			_ = resp.Body.Close()
		}
		runners, err := c.Runners(t.Context())
		require.NoError(t, err)
		require.Len(t, runners, 5, "every page, two at a time")
		require.Equal(t, []string{"42"}, runners[4].Labels)
		require.NoError(t, c.DeleteRunner(t.Context(), runners[0].ID))
		runners, err = c.Runners(t.Context())
		require.NoError(t, err)
		require.Len(t, runners, 4)

		bad, err := ghapi.New(gh.URL(), "wrong", scope)
		require.NoError(t, err)
		_, err = bad.RegistrationToken(t.Context())
		require.ErrorContains(t, err, fmt.Sprintf("create a runner registration token for %s", scope))
		require.ErrorContains(t, err, "401")
	}
}
