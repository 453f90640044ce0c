// Package ghapp authenticates Hangar as a GitHub App, for label-routed jobs: the App's JWT and
// its installation tokens come from github.com/bradleyfalzon/ghinstallation/v2 (no JWT code of
// our own), one token per installation, kept in memory for its hour. A 401 answer drops the
// installation's token (and reads the App's credentials again: the key may have been rotated)
// and the request is sent once more with a fresh one. Tokens are never written anywhere.
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

// Source returns the App's current credentials (Secrets Manager, in a deployment); fresh asks it
// to read them again rather than answer from a cache.
type Source func(ctx context.Context, fresh bool) (Credentials, error)

// App makes GitHub clients that act as installations of one App. It is safe for concurrent use.
type App struct {
	apiURL string
	source Source
	base   http.RoundTripper

	mu       sync.Mutex
	creds    Credentials
	apps     *ghinstallation.AppsTransport
	installs map[int64]*ghinstallation.Transport
	tokens   int // installation tokens asked for (a transport each)
}

// New returns an App for the GitHub API at apiURL, whose credentials come from source, sending
// its requests through base (http.DefaultTransport when nil). It makes no request.
func New(apiURL string, source Source, base http.RoundTripper) *App {
	if base == nil {
		base = http.DefaultTransport
	}
	return &App{apiURL: strings.TrimRight(apiURL, "/"), source: source, base: base, installs: map[int64]*ghinstallation.Transport{}}
}

// Client returns a GitHub client for scope that acts as the App's installation id.
func (a *App) Client(installation int64, scope ghapi.Scope) (*ghclient.Client, error) {
	if installation < 1 {
		return nil, fmt.Errorf("installation %d: want the GitHub App installation id", installation)
	}
	hc := &http.Client{Transport: &installationTransport{app: a, id: installation}, Timeout: 30 * time.Second}
	return ghclient.NewWithHTTP(a.apiURL, hc, scope)
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
	if a.apps == nil {
		creds, err := a.source(ctx, false)
		if err != nil {
			return nil, fmt.Errorf("the GitHub App's credentials: %w", err)
		}
		apps, err := ghinstallation.NewAppsTransport(a.base, creds.AppID, []byte(creds.PrivateKey))
		if err != nil {
			return nil, fmt.Errorf("the GitHub App's private key (app %d): %w", creds.AppID, err)
		}
		apps.BaseURL = a.apiURL
		a.apps, a.creds = apps, creds
	}
	t := ghinstallation.NewFromAppsTransport(a.apps, id)
	t.BaseURL = a.apiURL
	a.installs[id] = t
	a.tokens++
	return t, nil
}

// forget drops the installation's token after a 401, and the App's credentials with it when
// they have changed (a rotated key), so that the next request starts afresh.
func (a *App) forget(ctx context.Context, id int64) {
	fresh, err := a.source(ctx, true)
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.installs, id)
	if err == nil && fresh != a.creds {
		a.apps, a.installs = nil, map[int64]*ghinstallation.Transport{}
	}
}

// installationTransport authenticates requests as one installation, and sends a request that
// got 401 once more after dropping the token: an installation token can be revoked, or expire
// early by the server's clock.
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
	if err != nil || resp.StatusCode != http.StatusUnauthorized || retry == nil {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	t.app.forget(req.Context(), t.id)
	if tr, err = t.app.transport(req.Context(), t.id); err != nil {
		return nil, err
	}
	return tr.RoundTrip(retry)
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
