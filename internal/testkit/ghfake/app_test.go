package ghfake_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/golang-jwt/jwt/v4"
	"github.com/google/go-github/v66/github"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
)

const appID = 4242

// signJWT signs App JWT claims with key (RS256), as ghinstallation does.
func signJWT(t *testing.T, key *rsa.PrivateKey, iss any, iat, exp time.Time) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": iss, "iat": iat.Unix(), "exp": exp.Unix()}).SignedString(key)
	require.NoError(t, err)
	return tok
}

// installationClient is a go-github client acting as installation id of the App whose private
// key is pem, through ghinstallation, as Hangar's App client is.
func installationClient(t *testing.T, s *ghfake.Server, pem []byte, id int64) *github.Client {
	t.Helper()
	apps, err := ghinstallation.NewAppsTransport(http.DefaultTransport, appID, pem)
	require.NoError(t, err)
	apps.BaseURL = s.URL()
	tr := ghinstallation.NewFromAppsTransport(apps, id)
	tr.BaseURL = s.URL()
	c, err := github.NewClient(&http.Client{Transport: tr}).WithEnterpriseURLs(s.URL()+"/", s.URL()+"/")
	require.NoError(t, err)
	c.BaseURL.Path = "/"
	return c
}

// TestAppInstallationTokens: a JWT signed with the App's key gets an installation token (and
// nothing else does); the token works for its installation's owner and repositories only, and
// not after it expired.
func TestAppInstallationTokens(t *testing.T) {
	t.Parallel()
	s := ghfake.New("admin-token")
	defer s.Close()
	ctx := testCtx(t)

	pem := s.EnableApp(appID)
	require.Contains(t, string(pem), "-----BEGIN RSA PRIVATE KEY-----")
	key, err := jwt.ParseRSAPrivateKeyFromPEM(pem)
	require.NoError(t, err)
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	octo := s.Install("octo")
	acme := s.Install("acme", "acme/one")
	require.NotEqual(t, octo, acme)
	require.Equal(t, octo, s.Install("octo"), "installing again keeps the id")

	// ghinstallation's own flow: its JWT, its token request, its token on the REST API.
	runners, _, err := installationClient(t, s, pem, octo).Actions.ListRunners(ctx, "octo", "app", nil)
	require.NoError(t, err)
	require.Zero(t, runners.TotalCount)
	require.Equal(t, 1, s.Minted("installation"))
	require.EqualValues(t, 1, s.Requests("app"))
	require.EqualValues(t, 1, s.Requests("installation"))

	now := time.Now()
	path := func(id int64) string { return "/app/installations/" + strconv.FormatInt(id, 10) + "/access_tokens" }
	for _, tc := range []struct {
		name   string
		auth   string
		id     int64
		status int
	}{
		{"the App's key, iss a string", "Bearer " + signJWT(t, key, "4242", now.Add(-30*time.Second), now.Add(9*time.Minute)), octo, 201},
		{"the App's key, iss a number", "Bearer " + signJWT(t, key, appID, now, now.Add(10*time.Minute)), acme, 201},
		{"another key", "Bearer " + signJWT(t, other, "4242", now, now.Add(5*time.Minute)), octo, 401},
		{"another App", "Bearer " + signJWT(t, key, "4243", now, now.Add(5*time.Minute)), octo, 401},
		{"expired", "Bearer " + signJWT(t, key, "4242", now.Add(-20*time.Minute), now.Add(-11*time.Minute)), octo, 401},
		{"over ten minutes", "Bearer " + signJWT(t, key, "4242", now, now.Add(11*time.Minute)), octo, 401},
		{"issued in the future", "Bearer " + signJWT(t, key, "4242", now.Add(5*time.Minute), now.Add(10*time.Minute)), octo, 401},
		{"no JWT", "", octo, 401},
		{"an admin token", "Bearer admin-token", octo, 401},
		{"unknown installation", "Bearer " + signJWT(t, key, "4242", now, now.Add(5*time.Minute)), 999, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := rawPost(t, s, path(tc.id), tc.auth, []byte("{}"))
			defer func() { _ = resp.Body.Close() }()
			require.Equal(t, tc.status, resp.StatusCode)
			var body struct {
				Token       string            `json:"token"`
				ExpiresAt   time.Time         `json:"expires_at"`
				Permissions map[string]string `json:"permissions"`
				Selection   string            `json:"repository_selection"`
				Message     string            `json:"message"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			if tc.status != 201 {
				require.NotEmpty(t, body.Message)
				return
			}
			require.True(t, strings.HasPrefix(body.Token, "ghs_"), body.Token)
			require.WithinDuration(t, time.Now().Add(time.Hour), body.ExpiresAt, time.Minute)
			require.Equal(t, "write", body.Permissions["organization_self_hosted_runners"])
			want := map[int64]string{octo: "all", acme: "selected"}[tc.id]
			require.Equal(t, want, body.Selection)
		})
	}

	token := func(id int64) string {
		resp := rawPost(t, s, path(id), "Bearer "+signJWT(t, key, "4242", time.Now(), time.Now().Add(5*time.Minute)), nil)
		defer func() { _ = resp.Body.Close() }()
		require.Equal(t, 201, resp.StatusCode)
		var body struct {
			Token string `json:"token"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return body.Token
	}
	octoTok, acmeTok := token(octo), token(acme)
	for _, tc := range []struct {
		name, token, owner, repo string
		status                   int
	}{
		{"its owner's repository", octoTok, "octo", "app", 200},
		{"its owner's organisation", octoTok, "octo", "", 200},
		{"another owner", octoTok, "acme", "one", 401},
		{"a selected repository", acmeTok, "acme", "one", 200},
		{"a repository not selected", acmeTok, "acme", "two", 401},
		{"the admin token still", "admin-token", "acme", "two", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gh := client(t, s, tc.token)
			var err error
			if tc.repo == "" {
				_, _, err = gh.Actions.ListOrganizationRunners(ctx, tc.owner, nil)
			} else {
				_, _, err = gh.Actions.ListRunners(ctx, tc.owner, tc.repo, nil)
			}
			if tc.status == 200 {
				require.NoError(t, err)
			} else {
				require.Equal(t, tc.status, statusOf(err), "%v", err)
			}
		})
	}

	s.ExpireInstallationTokens()
	_, _, err = client(t, s, octoTok).Actions.ListRunners(ctx, "octo", "app", nil)
	require.Equal(t, 401, statusOf(err))
	require.Equal(t, "Bad credentials", messageOf(err))
	fresh := token(octo)
	_, _, err = client(t, s, fresh).Actions.ListRunners(ctx, "octo", "app", nil)
	require.NoError(t, err, "a token fetched after the expiry works")

	s.SetInstallationTokenTTL(time.Minute)
	short := token(octo)
	s.SetClock(func() time.Time { return time.Now().Add(2 * time.Minute) })
	_, _, err = client(t, s, short).Actions.ListRunners(ctx, "octo", "app", nil)
	require.Equal(t, 401, statusOf(err), "a token past its expiry by the server's clock")
	require.Positive(t, s.RequestCount())
}
