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

// TestRepositoryGroup: an organisation's repository gets a runner group open to it alone, made
// once and found after; a group of that name open to another repository, or to more than one, is
// refused; a repository's own scope needs no group.
func TestRepositoryGroup(t *testing.T) {
	t.Parallel()
	gh := ghfake.New("admin")
	defer gh.Close()
	gh.SetPageSize(1) // the group is found on a later page
	gh.SetGroup("someone-elses")
	c, err := ghclient.New(gh.URL(), "admin", ghapi.Scope{Owner: "octo"})
	require.NoError(t, err)
	app, web := gh.RepoID("octo/app"), gh.RepoID("octo/web")

	id, err := c.RepositoryGroup(t.Context(), "hangar-ci-repo-1", app)
	require.NoError(t, err)
	require.Greater(t, id, int64(ghapi.RepositoryGroupID))
	repos, ok := gh.Group("hangar-ci-repo-1")
	require.True(t, ok)
	require.Equal(t, []string{"octo/app"}, repos, "open to the repository alone")
	again, err := c.RepositoryGroup(t.Context(), "hangar-ci-repo-1", app)
	require.NoError(t, err)
	require.Equal(t, id, again, "found, not made again")
	require.Equal(t, 1, gh.GroupsMade())

	_, err = c.RepositoryGroup(t.Context(), "hangar-ci-repo-1", web)
	require.ErrorIs(t, err, ghapi.ErrGroupNotOwn, "another repository's group")
	gh.SetGroup("hangar-ci-repo-2", "octo/web", "octo/app")
	_, err = c.RepositoryGroup(t.Context(), "hangar-ci-repo-2", web)
	require.ErrorIs(t, err, ghapi.ErrGroupNotOwn, "a group open to more than the repository")
	_, err = c.RepositoryGroup(t.Context(), ghfake.DefaultGroup, web)
	require.ErrorIs(t, err, ghapi.ErrGroupNotOwn, "the default group is open to every repository")

	repoScoped, err := ghclient.New(gh.URL(), "admin", ghapi.Scope{Owner: "octo", Repo: "app"})
	require.NoError(t, err)
	id, err = repoScoped.RepositoryGroup(t.Context(), "unused", app)
	require.NoError(t, err)
	require.EqualValues(t, ghapi.RepositoryGroupID, id)
	require.Equal(t, 1, gh.GroupsMade())
}
