package ghapp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	now := time.Unix(1_800_000_000, 0)
	app.Now = func() time.Time { return now }
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
	// read and used (past the bound on re-reads the expired token's read started).
	now = now.Add(time.Minute)
	src.set(ghapp.Credentials{AppID: 42, PrivateKey: string(gh.EnableApp(42))})
	gh.ExpireInstallationTokens()
	reads := src.reads
	_, err = c.Runners(t.Context())
	require.NoError(t, err, "the rotated key is read again")
	require.Greater(t, src.reads, reads)
	require.Equal(t, 3, gh.Minted("installation"))
}

// cachedSource is the App secret as the dispatcher reads it: a cached value, and the secret's
// current one when asked afresh.
type cachedSource struct {
	mu            sync.Mutex
	secret, cache ghapp.Credentials
	cached        bool
	fresh         int // reads afresh
}

func (s *cachedSource) get(_ context.Context, fresh bool) (ghapp.Credentials, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fresh {
		s.fresh++
	}
	if fresh || !s.cached {
		s.cache, s.cached = s.secret, true
	}
	return s.cache, nil
}

func (s *cachedSource) set(c ghapp.Credentials) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secret = c
}

func (s *cachedSource) reads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fresh
}

// TestRotation: a key rotated or deleted on GitHub fails the token request itself (not only an
// API call) for an installation without a token yet; that too reads the credentials afresh, at
// most once per ten seconds however many requests fail, and the rotated key is taken up as soon
// as the secret holds it. A secret that held no valid key is read afresh too.
func TestRotation(t *testing.T) {
	t.Parallel()
	gh := ghfake.New("admin")
	defer gh.Close()
	src := &cachedSource{secret: ghapp.Credentials{AppID: 42, PrivateKey: string(gh.EnableApp(42))}}
	first, second := gh.Install("octo"), gh.Install("acme")
	now := time.Unix(1_800_000_000, 0)
	app := ghapp.New(gh.URL(), src.get, nil)
	app.Now = func() time.Time { return now }
	c1, err := app.Client(first, ghapi.Scope{Owner: "octo", Repo: "app"})
	require.NoError(t, err)
	_, err = c1.Runners(t.Context())
	require.NoError(t, err)

	// The key is rotated on GitHub; the secret still holds the old one (not yet updated).
	rotated := gh.EnableApp(42)
	c2, err := app.Client(second, ghapi.Scope{Owner: "acme", Repo: "app"})
	require.NoError(t, err)
	for range 20 {
		_, err = c2.Runners(t.Context())
		require.Error(t, err, "the old key's JWT is refused")
	}
	require.Equal(t, 1, src.reads(), "a burst of failures reads the secret once")

	// The secret is updated: within the bound the failures go on without another read; after
	// it, the next request reads the new key and works, for every installation.
	src.set(ghapp.Credentials{AppID: 42, PrivateKey: string(rotated)})
	now = now.Add(5 * time.Second)
	_, err = c2.Runners(t.Context())
	require.Error(t, err)
	require.Equal(t, 1, src.reads())
	now = now.Add(6 * time.Second)
	_, err = c2.Runners(t.Context())
	require.NoError(t, err, "the token request failed, the key was read again, and the request sent once more")
	require.Equal(t, 2, src.reads())
	gh.ExpireInstallationTokens()
	_, err = c1.Runners(t.Context())
	require.NoError(t, err, "the other installation gets a token with the new key")

	// A secret whose key does not parse fails without a request to GitHub, and is read afresh
	// once the bound has passed.
	bad := &cachedSource{secret: ghapp.Credentials{AppID: 42, PrivateKey: "-----BEGIN RSA PRIVATE KEY-----\nnot a key\n-----END RSA PRIVATE KEY-----"}}
	app = ghapp.New(gh.URL(), bad.get, nil)
	app.Now = func() time.Time { return now }
	c, err := app.Client(first, ghapi.Scope{Owner: "octo", Repo: "app"})
	require.NoError(t, err)
	_, err = c.Runners(t.Context())
	require.ErrorContains(t, err, "private key")
	bad.set(ghapp.Credentials{AppID: 42, PrivateKey: string(rotated)})
	now = now.Add(11 * time.Second)
	_, err = c.Runners(t.Context())
	require.NoError(t, err, "the fixed secret is read afresh")
}

// TestCanMakeRunners: an installation whose token carries the permission its scope needs may
// make runners; one without it is told which permission is missing, for a repository
// (Administration) and an organisation (Self-hosted runners), before any runner call.
func TestCanMakeRunners(t *testing.T) {
	t.Parallel()
	gh := ghfake.New("admin")
	defer gh.Close()
	gh.SetOrg("acme")
	src := &source{creds: ghapp.Credentials{AppID: 42, PrivateKey: string(gh.EnableApp(42))}}
	octo, acme := gh.Install("octo"), gh.Install("acme")
	app := ghapp.New(gh.URL(), src.get, nil)
	for _, tc := range []struct {
		installation int64
		scope        ghapi.Scope
	}{{octo, ghapi.Scope{Owner: "octo", Repo: "app"}}, {acme, ghapi.Scope{Owner: "acme"}}} {
		c, err := app.Client(tc.installation, tc.scope)
		require.NoError(t, err)
		require.NoError(t, c.CanMakeRunners(t.Context()), tc.scope)
	}

	gh.WithholdPermission("octo", "administration")
	gh.WithholdPermission("acme", "organization_self_hosted_runners")
	gh.ExpireInstallationTokens()
	app = ghapp.New(gh.URL(), src.get, nil) // a fresh process: new tokens, with what was granted
	c, err := app.Client(octo, ghapi.Scope{Owner: "octo", Repo: "app"})
	require.NoError(t, err)
	err = c.CanMakeRunners(t.Context())
	require.ErrorContains(t, err, "its Administration permission is none, want write")
	require.ErrorIs(t, err, ghapi.ErrAppRefused)
	_, err = c.GenerateJITConfig(t.Context(), ghapi.JITRequest{Name: "r", Labels: []string{"self-hosted"}, GroupID: 1})
	require.Error(t, err, "GitHub refuses it too")
	c, err = app.Client(acme, ghapi.Scope{Owner: "acme"})
	require.NoError(t, err)
	require.ErrorContains(t, c.CanMakeRunners(t.Context()), "its Self-hosted runners (organisation) permission is none")

	// A key GitHub no longer accepts is an error of the token, named.
	gh.EnableApp(42)
	app = ghapp.New(gh.URL(), src.get, nil)
	c, err = app.Client(octo, ghapi.Scope{Owner: "octo", Repo: "app"})
	require.NoError(t, err)
	err = c.CanMakeRunners(t.Context())
	require.ErrorContains(t, err, "the installation token of installation")
	require.ErrorIs(t, err, ghapi.ErrAppRefused, "someone must mend it")
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

// TestSweepReads: what the sweep asks as the App and as an installation, against the stand-in's
// REST API: the webhook's delivery attempts newest first, page by page, with what each answered;
// a redelivery asked for is made, under the same GUID, marked as one; the installations, their
// repositories, a repository's runs not completed and a run's jobs; and a rotated key is
// read again for the App's own requests too.
func TestSweepReads(t *testing.T) {
	t.Parallel()
	gh := ghfake.New("admin")
	defer gh.Close()
	src := &source{creds: ghapp.Credentials{AppID: 42, PrivateKey: string(gh.EnableApp(42))}}
	installation := gh.Install("octo", "octo/app")
	answers := []int{http.StatusAccepted, http.StatusServiceUnavailable}
	var calls atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(answers[calls.Add(1)%2]) // 503, 202, 503, …
	}))
	defer hook.Close()
	gh.SetWebhook(hook.URL, "s3cret")
	var jobs []int64
	for range 3 {
		jobs = append(jobs, gh.QueueJob("octo/app", []string{"self-hosted", "hangar"}, "true"))
	}
	require.NoError(t, gh.WaitDeliveries(t.Context(), 3))

	app := ghapp.New(gh.URL(), src.get, nil)
	now := time.Unix(1_800_000_000, 0)
	app.Now = func() time.Time { return now }
	ac, err := app.AppClient()
	require.NoError(t, err)
	var all []ghapi.Delivery
	for cursor, pages := "", 0; ; pages++ {
		require.Less(t, pages, 3)
		page, next, err := ac.HookDeliveries(t.Context(), cursor)
		require.NoError(t, err)
		all = append(all, page...)
		if next == "" {
			break
		}
		cursor = next
	}
	require.Len(t, all, 3)
	require.True(t, all[0].ID > all[1].ID && all[1].ID > all[2].ID, "newest first")
	require.Equal(t, []int{503, 202, 503}, []int{all[2].StatusCode, all[1].StatusCode, all[0].StatusCode})
	require.Equal(t, installation, all[0].Installation)
	require.Equal(t, "queued", all[0].Action)

	require.NoError(t, ac.Redeliver(t.Context(), all[0].ID))
	require.NoError(t, gh.WaitDeliveries(t.Context(), 4))
	page, _, err := ac.HookDeliveries(t.Context(), "")
	require.NoError(t, err)
	require.Equal(t, all[0].GUID, page[0].GUID, "the same event")
	require.True(t, page[0].Redelivery)
	require.Equal(t, 1, gh.Redelivered())

	ids, _, err := ac.Installations(t.Context(), 10)
	require.NoError(t, err)
	require.Equal(t, []int64{installation}, ids)
	c, err := app.Client(installation, ghapi.Scope{})
	require.NoError(t, err)
	repos, _, err := c.Repositories(t.Context(), 10)
	require.NoError(t, err)
	require.Equal(t, []ghapi.Repository{{ID: gh.RepoID("octo/app"), FullName: "octo/app"}}, repos)
	runs, requests, err := c.ActiveRuns(t.Context(), "octo", "app")
	require.NoError(t, err)
	require.Equal(t, 1, requests)
	require.Len(t, runs, 1, "the stand-in's jobs are of one run")
	listed, err := c.RunJobs(t.Context(), "octo", "app", runs[0].ID)
	require.NoError(t, err)
	require.Len(t, listed, 3)
	require.Equal(t, jobs, []int64{listed[0].ID, listed[1].ID, listed[2].ID})
	require.Equal(t, "queued", listed[0].Status)
	require.Equal(t, []string{"self-hosted", "hangar"}, listed[0].Labels)

	// The key is rotated: the App's own requests read it again.
	now = now.Add(time.Minute)
	src.set(ghapp.Credentials{AppID: 42, PrivateKey: string(gh.EnableApp(42))})
	_, _, err = ac.Installations(t.Context(), 10)
	require.NoError(t, err, "the rotated key is read again")
}
