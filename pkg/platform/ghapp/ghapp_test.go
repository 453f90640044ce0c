package ghapp_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/platform/ghapp"
)

// source is the App's credentials as Secrets Manager holds them, counting its reads.
type source struct {
	mu    sync.Mutex
	creds ghapp.Credentials
	reads int
}

func (s *source) get(_ context.Context, _ bool) (ghapp.Credentials, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	return s.creds, nil
}

func (s *source) set(c ghapp.Credentials) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.creds = c
}

// TestInstallationTokens: the App acts as its installation with one token, kept while it works;
// a token GitHub refuses before its stated expiry (revoked, or the clocks disagree) is dropped
// and the request sent again with a fresh one; a rotated key is read again from the source.
func TestInstallationTokens(t *testing.T) {
	t.Parallel()
	gh := ghfake.New("admin")
	defer gh.Close()
	src := &source{creds: ghapp.Credentials{AppID: 42, PrivateKey: string(gh.EnableApp(42))}}
	installation := gh.Install("octo")
	app := ghapp.New(gh.URL(), src.get, nil)
	c, err := app.Client(installation, ghapi.Scope{Owner: "octo", Repo: "app"})
	require.NoError(t, err)

	for range 3 {
		_, err := c.Runners(t.Context())
		require.NoError(t, err)
	}
	require.Equal(t, 1, gh.Minted("installation"), "one token while it works")
	require.Equal(t, 1, app.TokensMinted())

	gh.ExpireInstallationTokens()
	_, err = c.Runners(t.Context())
	require.NoError(t, err, "the refused token is replaced and the request sent again")
	require.Equal(t, 2, gh.Minted("installation"))

	// The key is rotated on GitHub and in the secret: the old key's JWT is refused, the new one
	// read and used.
	src.set(ghapp.Credentials{AppID: 42, PrivateKey: string(gh.EnableApp(42))})
	gh.ExpireInstallationTokens()
	reads := src.reads
	_, err = c.Runners(t.Context())
	require.NoError(t, err, "the rotated key is read again")
	require.Greater(t, src.reads, reads)
	require.Equal(t, 3, gh.Minted("installation"))
}

// TestParseCredentials: the App secret is JSON with the App's id and its PEM key; anything else
// is refused with what is wanted.
func TestParseCredentials(t *testing.T) {
	t.Parallel()
	c, err := ghapp.ParseCredentials(`{"appId": 7, "privateKey": "-----BEGIN RSA PRIVATE KEY-----\nx\n-----END RSA PRIVATE KEY-----"}`)
	require.NoError(t, err)
	require.EqualValues(t, 7, c.AppID)
	for _, tc := range []struct{ secret, want string }{
		{`not json`, `JSON of the form {"appId": 123`},
		{`{"appId": 0, "privateKey": "-----BEGIN RSA PRIVATE KEY-----"}`, "appId 0: want the GitHub App's id"},
		{`{"appId": 7, "privateKey": "ssh-rsa AAAA"}`, "privateKey: want the App's private key in PEM"},
		{`{"appId": 7, "privateKey": "-----BEGIN RSA PRIVATE KEY-----", "webhookSecret": "x"}`, "JSON of the form"},
	} {
		_, err := ghapp.ParseCredentials(tc.secret)
		require.ErrorContains(t, err, tc.want, tc.secret)
	}
	_, err = ghapp.New("http://127.0.0.1:1", nil, nil).Client(0, ghapi.Scope{Owner: "octo"})
	require.ErrorContains(t, err, "installation 0")
}
