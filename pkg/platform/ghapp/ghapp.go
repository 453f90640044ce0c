// Package ghapp authenticates Hangar as a GitHub App, for label-routed jobs: the App's JWT and
// its installation tokens come from github.com/bradleyfalzon/ghinstallation/v2 (no JWT code of
// our own), one token per installation, kept in memory for its hour. Any failure to
// authenticate (a 401 answer, a token GitHub would not mint for the App's JWT, a key that does
// not parse) drops the installation's token and reads the App's credentials again, at most once
// per credentialRereadEvery (the key may have been rotated), and the request is sent once more
// with a fresh token. Tokens are never written anywhere.
package ghapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v66/github"

	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/platform/ghclient"
)

// Credentials are the App's: its id and its private key (PEM).
type Credentials struct {
	AppID      int64  `json:"appId"`
	PrivateKey string `json:"privateKey"`
}

// ParseCredentials reads the App secret's value: {"appId": 123, "privateKey": "-----BEGIN ..."}.
func ParseCredentials(secret string) (Credentials, error) {
	var c Credentials
	dec := json.NewDecoder(strings.NewReader(secret))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Credentials{}, fmt.Errorf("the App secret is not JSON of the form {\"appId\": 123, \"privateKey\": \"-----BEGIN RSA PRIVATE KEY-----...\"}: %w", err)
	}
	if c.AppID < 1 {
		return Credentials{}, fmt.Errorf("the App secret's appId %d: want the GitHub App's id (App settings, About)", c.AppID)
	}
	if !strings.Contains(c.PrivateKey, "PRIVATE KEY-----") {
		return Credentials{}, errors.New("the App secret's privateKey: want the App's private key in PEM, as GitHub's .pem file holds it")
	}
	return c, nil
}

// credentialRereadEvery bounds how often failures to authenticate read the App's credentials
// again: a burst of refused requests costs one Secrets Manager read, and a rotated key is taken
// up within it.
const credentialRereadEvery = 10 * time.Second

// Source returns the App's current credentials (Secrets Manager, in a deployment); fresh asks it
// to read them again rather than answer from a cache.
type Source func(ctx context.Context, fresh bool) (Credentials, error)

// App makes GitHub clients that act as installations of one App. It is safe for concurrent use.
type App struct {
	apiURL string
	source Source
	base   http.RoundTripper

	// Now is the clock of the re-read bound (time.Now when nil).
	Now func() time.Time

	rereading sync.Mutex // held while the credentials are read again (forget)

	mu       sync.Mutex
	creds    Credentials
	apps     *ghinstallation.AppsTransport
	installs map[int64]*ghinstallation.Transport
	tokens   int       // installation tokens asked for (a transport each)
	stale    bool      // the credentials failed: the next ones are read afresh
	reread   time.Time // when the credentials were last read afresh
}

// New returns an App for the GitHub API at apiURL, whose credentials come from source, sending
// its requests through base (http.DefaultTransport when nil). It makes no request.
func New(apiURL string, source Source, base http.RoundTripper) *App {
	if base == nil {
		base = http.DefaultTransport
	}
	return &App{apiURL: strings.TrimRight(apiURL, "/"), source: source, base: base, installs: map[int64]*ghinstallation.Transport{}}
}

// Client is a GitHub client for one scope that acts as one installation of the App.
type Client struct {
	*ghclient.Client
	app   *App
	id    int64
	scope ghapi.Scope
}

// Client returns a GitHub client for scope that acts as the App's installation id.
func (a *App) Client(installation int64, scope ghapi.Scope) (*Client, error) {
	if installation < 1 {
		return nil, fmt.Errorf("installation %d: want the GitHub App installation id", installation)
	}
	hc := &http.Client{Transport: &installationTransport{app: a, id: installation}, Timeout: 30 * time.Second}
	c, err := ghclient.NewWithHTTP(a.apiURL, hc, scope)
	if err != nil {
		return nil, err
	}
	return &Client{Client: c, app: a, id: installation, scope: scope}, nil
}

// CanMakeRunners says why the installation cannot make and delete self-hosted runners in the
// client's scope: its token refused (the App's key, the installation suspended), or without
// the permission (repository Administration: write; organisation Self-hosted runners: write).
// The permissions come with the installation token, which the runner calls need anyway.
func (c *Client) CanMakeRunners(ctx context.Context) error {
	perms, err := c.app.permissions(ctx, c.id)
	if err != nil {
		return err
	}
	permission, got := "Administration", perms.GetAdministration()
	if c.scope.IsOrg() {
		permission, got = "Self-hosted runners (organisation)", perms.GetOrganizationSelfHostedRunners()
	}
	if got != "write" {
		if got == "" {
			got = "none"
		}
		return fmt.Errorf("%w: installation %d may not make runners in %s: its %s permission is %s, want write (the App's settings, Permissions; then accept the change on the installation)",
			ghapi.ErrAppRefused, c.id, c.scope, permission, got)
	}
	return nil
}

// permissions returns what the installation's token may do, getting a token first if need be; a
// token GitHub refuses reads the App's credentials again (forget) and is asked for once more.
func (a *App) permissions(ctx context.Context, id int64) (*github.InstallationPermissions, error) {
	for try := 0; ; try++ {
		t, err := a.transport(ctx, id)
		if err != nil {
			return nil, err
		}
		if _, err = t.Token(ctx); err == nil {
			p, err := t.Permissions()
			return &p, err
		}
		switch {
		case !authFailed(nil, err):
			return nil, fmt.Errorf("the installation token of installation %d: %w", id, err)
		case try > 0:
			return nil, fmt.Errorf("%w: the installation token of installation %d: %w", ghapi.ErrAppRefused, id, err)
		}
		a.forget(ctx, id)
	}
}

// TokensMinted counts the installation transports made: each asks GitHub for a token once an
// hour while it is used.
func (a *App) TokensMinted() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tokens
}

// transport returns the installation's transport, making the App's transport first if need be.
func (a *App) transport(ctx context.Context, id int64) (*ghinstallation.Transport, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t := a.installs[id]; t != nil {
		return t, nil
	}
	if _, err := a.appsLocked(ctx); err != nil {
		return nil, err
	}
	// Each installation gets an App transport of its own: ghinstallation writes to the one it
	// was made from whenever it refreshes a token, and a shared one would be written by one
	// installation while another reads it.
	own, err := ghinstallation.NewAppsTransport(a.base, a.creds.AppID, []byte(a.creds.PrivateKey))
	if err != nil {
		return nil, fmt.Errorf("the GitHub App's private key (app %d): %w", a.creds.AppID, err)
	}
	own.BaseURL = a.apiURL
	t := ghinstallation.NewFromAppsTransport(own, id)
	t.BaseURL = a.apiURL
	a.installs[id] = t
	a.tokens++
	return t, nil
}

// appsLocked returns the App's own transport (its JWT), reading the credentials first if need be;
// a.mu is held.
func (a *App) appsLocked(ctx context.Context) (*ghinstallation.AppsTransport, error) {
	if a.apps != nil {
		return a.apps, nil
	}
	fresh := a.stale && a.rereadDue()
	creds, err := a.source(ctx, fresh)
	if err != nil {
		a.stale = true
		return nil, fmt.Errorf("the GitHub App's credentials: %w", err)
	}
	apps, err := ghinstallation.NewAppsTransport(a.base, creds.AppID, []byte(creds.PrivateKey))
	if err != nil {
		a.stale = true
		return nil, fmt.Errorf("the GitHub App's private key (app %d): %w", creds.AppID, err)
	}
	apps.BaseURL = a.apiURL
	a.apps, a.creds, a.stale = apps, creds, false
	return apps, nil
}

// AppClient returns a client that acts as the App itself (its JWT): its webhook's deliveries and
// its installations. A request GitHub refuses (401: a rotated or deleted key) reads the
// credentials again, as the installations' do, and is sent once more.
func (a *App) AppClient() (*ghclient.AppClient, error) {
	return ghclient.NewApp(a.apiURL, &http.Client{Transport: &appTransport{app: a}, Timeout: 30 * time.Second})
}

// appTransport authenticates requests as the App, with one more try after a refusal.
type appTransport struct{ app *App }

func (t *appTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	send := func(req *http.Request) (*http.Response, error) {
		t.app.mu.Lock()
		apps, err := t.app.appsLocked(req.Context())
		t.app.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return apps.RoundTrip(req)
	}
	retry, err := replayable(req)
	if err != nil {
		return nil, err
	}
	resp, err := send(req)
	if !authFailed(resp, err) || retry == nil {
		return resp, err
	}
	if resp != nil {
		discard(resp)
	}
	t.app.forget(req.Context(), 0)
	return send(retry)
}

// rereadDue reports whether the credentials may be read afresh now, and if so notes it; a.mu is
// held.
func (a *App) rereadDue() bool {
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	if !a.reread.IsZero() && now().Sub(a.reread) < credentialRereadEvery {
		return false
	}
	a.reread = now()
	return true
}

// forget drops the installation's token after a failure to authenticate, and the App's
// credentials with it when they have changed (a rotated key), so that the next request starts
// afresh; within credentialRereadEvery of the last re-read it drops the token alone.
func (a *App) forget(ctx context.Context, id int64) {
	// One re-read at a time; a failure while one is under way waits for it, so that its retry
	// uses what it read (a burst of requests refused by a rotated key all retry with the new one).
	a.rereading.Lock()
	defer a.rereading.Unlock()
	a.mu.Lock()
	delete(a.installs, id)
	due := a.rereadDue()
	a.mu.Unlock()
	if !due {
		return
	}
	fresh, err := a.source(ctx, true)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil && fresh != a.creds {
		a.apps, a.installs = nil, map[int64]*ghinstallation.Transport{}
	}
}

// authFailed reports whether a request failed to authenticate: GitHub answered 401, or refused
// the installation token the App's JWT asked for (ghinstallation's error, 401 or 403).
func authFailed(resp *http.Response, err error) bool {
	var he *ghinstallation.HTTPError
	if errors.As(err, &he) {
		return he.Response != nil && (he.Response.StatusCode == http.StatusUnauthorized || he.Response.StatusCode == http.StatusForbidden)
	}
	return err == nil && resp.StatusCode == http.StatusUnauthorized
}

// installationTransport authenticates requests as one installation, and sends a request that
// failed to authenticate once more after dropping the token: an installation token can be
// revoked or expire early by the server's clock, and the App's key can be rotated or deleted.
type installationTransport struct {
	app *App
	id  int64
}

func (t *installationTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tr, err := t.app.transport(req.Context(), t.id)
	if err != nil {
		return nil, err
	}
	retry, err := replayable(req)
	if err != nil {
		return nil, err
	}
	resp, err := tr.RoundTrip(req)
	var he *ghinstallation.HTTPError
	if errors.As(err, &he) && he.Response != nil {
		discard(he.Response) // ghinstallation leaves a refused token request's body open
	}
	if !authFailed(resp, err) || retry == nil {
		return resp, err
	}
	if resp != nil {
		discard(resp)
	}
	t.app.forget(req.Context(), t.id)
	if tr, err = t.app.transport(req.Context(), t.id); err != nil {
		return nil, err
	}
	return tr.RoundTrip(retry)
}

// discard reads and closes a response's body.
func discard(resp *http.Response) {
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// replayable returns a copy of req to send again, or nil when its body cannot be read twice.
func replayable(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req.Clone(req.Context()), nil
	}
	if req.GetBody == nil {
		return nil, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	c := req.Clone(req.Context())
	c.Body = body
	return c, nil
}
