package ghclient_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/platform/ghclient"
)

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
		c, err := ghclient.New(gh.URL(), "admin", scope)
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
		require.NoError(t, c.DeleteRunner(t.Context(), 424242), "a runner gone already is deleted: no 404 reaches the caller")
		_, err = c.RunnerByName(t.Context(), "nobody")
		require.True(t, ghapi.IsNotFound(err), "%v", err)

		bad, err := ghclient.New(gh.URL(), "wrong", scope)
		require.NoError(t, err)
		_, err = bad.RegistrationToken(t.Context())
		require.ErrorContains(t, err, fmt.Sprintf("create a runner registration token for %s", scope))
		require.ErrorContains(t, err, "401")
		require.True(t, ghapi.IsUnauthorized(err), "classified: %v", err)
	}
	_, err := ghclient.New("not a url", "t", ghapi.Scope{Owner: "octo"})
	require.ErrorContains(t, err, "GitHub API URL")
}
