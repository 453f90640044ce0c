// Package setup registers a stack's GitHub App through GitHub's manifest flow: it serves, on
// the operator's machine, a page that posts the App's manifest to GitHub; GitHub sends the
// browser back with a one-time code; the code is exchanged for the App's id, key and webhook
// secret, which go straight into the stack's secrets. No key is ever copied by hand.
package setup

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/operator"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/platform/ghapp"
	"github.com/hangar-ci/hangar/pkg/platform/ghclient"
	"github.com/hangar-ci/hangar/pkg/platform/ghurl"
)

// Stack is what the App is registered for: read from the deployed stack.
type Stack struct {
	Name string
	// GitHubURL is the GitHub server the stack's pools pin (https://github.com, or an enterprise
	// server's URL).
	GitHubURL string
	// WebhookURL is the stack's Function URL (its WebhookUrl output).
	WebhookURL string
	// AppSecretARN and WebhookSecretARN are the secrets the App's credentials go into.
	AppSecretARN, WebhookSecretARN string
	// OrgScoped is set when some pool's runners are organisation runners: the App then asks for
	// the organisation's self-hosted runners permission.
	OrgScoped bool
}

// Secrets writes a secret's new value (Secrets Manager's PutSecretValue).
type Secrets interface {
	Put(ctx context.Context, arn, value string) error
}

// Options are a setup's inputs.
type Options struct {
	Stack Stack
	// Org is the organisation that will own the App; empty for the signed-in user's account.
	Org string
	// Name is the App's name (default hangar-<stack>): unique on the GitHub server, at most 34
	// characters.
	Name    string
	Secrets Secrets
	// HTTP is the client for GitHub's API (the code exchange, and the new App's first request).
	HTTP *http.Client
	Log  *slog.Logger
	// Ready is told the local page's address once it is served: the operator opens it.
	Ready func(pageURL string)
	// Timeout bounds the whole setup (default 30 minutes).
	Timeout time.Duration
}

// Result is the App setup registered.
type Result struct {
	App ghapi.App
	// InstallURL is the App's page for installing it on repositories.
	InstallURL string
}

// Permissions is what Hangar's App asks of each installation (docs/labels.md says why each).
func Permissions(orgScoped bool) map[string]string {
	p := map[string]string{"actions": "read", "administration": "write", "metadata": "read"}
	if orgScoped {
		p["organization_self_hosted_runners"] = "write"
	}
	return p
}

// Events are the events the App subscribes to: the one event label-routed jobs need.
var Events = []string{"workflow_job"}

// DefaultTimeout bounds a setup: the operator reads two pages and clicks twice.
const DefaultTimeout = 30 * time.Minute

// login is a GitHub account name: letters, digits and single hyphens, at most 39.
var login = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9]|-[A-Za-z0-9]){0,38}$`)

// appName is a name GitHub accepts for an App.
var appName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 ._-]{0,33}$`)

// CheckInput checks what the operator gives setup (the owning organisation, the App's name,
// the wait), naming each bad one; name "" stands for the default, hangar-<stack>.
func CheckInput(stack, org, name string, timeout time.Duration) error {
	var errs []error
	if name == "" {
		name = "hangar-" + stack
	}
	if org != "" && !login.MatchString(org) {
		errs = append(errs, fmt.Errorf("%w: --org %q: want an organisation's login (letters, digits, single hyphens, at most 39)", operator.ErrBadInput, org))
	}
	if !appName.MatchString(name) {
		errs = append(errs, fmt.Errorf("%w: --name %q: want at most 34 letters, digits, spaces, dots, dashes or underscores, starting with a letter or digit", operator.ErrBadInput, name))
	}
	if timeout < 0 {
		errs = append(errs, fmt.Errorf("%w: --timeout %s: want a positive duration such as 30m", operator.ErrBadInput, timeout))
	}
	return errors.Join(errs...)
}

// Validate checks the options before anything is served or asked, naming each bad one, and
// fills in the defaults.
func (o *Options) Validate() error {
	errs := []error{CheckInput(o.Stack.Name, o.Org, o.Name, o.Timeout)}
	if o.Name == "" {
		o.Name = "hangar-" + o.Stack.Name
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if err := ghurl.CheckServer(o.Stack.GitHubURL); err != nil {
		errs = append(errs, fmt.Errorf("the stack's GitHub server %w", err))
	}
	if u, err := url.Parse(o.Stack.WebhookURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		errs = append(errs, fmt.Errorf("the stack's WebhookUrl output %q: want the Function URL; is the stack deployed with label-routed jobs (a pool with jobs:)?", o.Stack.WebhookURL))
	}
	if o.Stack.AppSecretARN == "" || o.Stack.WebhookSecretARN == "" {
		errs = append(errs, errors.New("the stack has no AppSecretArn or WebhookSecretArn output: is it deployed with label-routed jobs (a pool with jobs:)?"))
	}
	if o.Secrets == nil || o.HTTP == nil {
		errs = append(errs, errors.New("setup: Options.Secrets and Options.HTTP must be set"))
	}
	return errors.Join(errs...)
}

// manifest is the App's registration, as the manifest flow takes it.
type manifest struct {
	Name               string            `json:"name"`
	URL                string            `json:"url"`
	Description        string            `json:"description"`
	HookAttributes     hookAttributes    `json:"hook_attributes"`
	RedirectURL        string            `json:"redirect_url"`
	Public             bool              `json:"public"`
	DefaultEvents      []string          `json:"default_events"`
	DefaultPermissions map[string]string `json:"default_permissions"`
}

type hookAttributes struct {
	URL    string `json:"url"`
	Active bool   `json:"active"`
}

// run is one setup in progress.
type run struct {
	o        Options
	host     string // the page's host:port: requests for any other host are refused
	token    string // in the page's URL: only who was given the address sees the page
	state    string // sent to GitHub with the manifest, and checked when the browser comes back
	api, web string
	// ctx is Run's: the exchange and the writes end with the setup, not with the browser's request.
	ctx    context.Context
	mu     sync.Mutex
	done   bool
	result chan Result
	failed chan error
}

// Run serves the setup page on a loopback address until GitHub sends the browser back with the
// App it registered, stores the App's credentials in the stack's secrets, and returns the App.
// It refuses, before serving anything, options that Validate refuses.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen on a loopback port for the setup page: %w", err)
	}
	web := strings.TrimRight(o.Stack.GitHubURL, "/")
	r := &run{o: o, host: ln.Addr().String(), token: random(16), state: random(32), web: web, api: ghurl.APIURL(web),
		ctx: ctx, result: make(chan Result, 1), failed: make(chan error, 1)}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		shut, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer stop()
		_ = srv.Shutdown(shut)
	}()
	page := fmt.Sprintf("http://%s/?t=%s", r.host, r.token)
	if o.Ready != nil {
		o.Ready(page)
	}
	select {
	case res := <-r.result:
		return &res, nil
	case err := <-r.failed:
		return nil, err
	case <-ctx.Done():
		return nil, fmt.Errorf("no App was registered within %s (the page was %s): %w", o.Timeout, page, ctx.Err())
	}
}

func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ServeHTTP serves the setup page and GitHub's redirect back to it.
func (r *run) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	// Another host name (a DNS-rebinding page) or another origin's form never reaches the flow.
	if req.Host != r.host {
		http.Error(w, "unknown host", http.StatusMisdirectedRequest)
		return
	}
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", fmt.Sprintf("default-src 'none'; style-src 'unsafe-inline'; form-action %s; frame-ancestors 'none'", r.web))
	switch {
	case req.Method == http.MethodGet && req.URL.Path == "/":
		r.page(w, req)
	case req.Method == http.MethodGet && req.URL.Path == "/created":
		r.created(w, req)
	default:
		http.NotFound(w, req)
	}
}

// formAction is where the manifest is posted: the organisation's new-App page, or the signed-in
// user's.
func (r *run) formAction() string {
	q := url.Values{"state": {r.state}}.Encode()
	if r.o.Org != "" {
		return fmt.Sprintf("%s/organizations/%s/settings/apps/new?%s", r.web, url.PathEscape(r.o.Org), q)
	}
	return r.web + "/settings/apps/new?" + q
}

// manifest is the App to register.
func (r *run) manifest() manifest {
	return manifest{
		Name: r.o.Name, URL: "https://github.com/hangar-ci/hangar",
		Description:    fmt.Sprintf("Runs label-routed jobs on the Hangar stack %s's warm EC2 instances.", r.o.Stack.Name),
		HookAttributes: hookAttributes{URL: r.o.Stack.WebhookURL, Active: true},
		RedirectURL:    "http://" + r.host + "/created",
		// Anyone could install a public App: keep it to its owner.
		Public:             false,
		DefaultEvents:      Events,
		DefaultPermissions: Permissions(r.o.Stack.OrgScoped),
	}
}

var setupPage = template.Must(template.New("setup").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Hangar: register the GitHub App</title>
<style>body{font-family:sans-serif;max-width:48em;margin:2em auto}td{padding:.2em 1em .2em 0}</style></head>
<body><h1>Register the GitHub App of stack {{.Stack}}</h1>
<p>GitHub will ask you to confirm, then send you back here; Hangar stores the App's id, key and
webhook secret in the stack's secrets.</p>
<table>
<tr><td>App</td><td>{{.Name}} (private)</td></tr>
<tr><td>Owner</td><td>{{.Owner}}</td></tr>
<tr><td>Webhook</td><td>{{.Webhook}}</td></tr>
<tr><td>Event</td><td>workflow_job</td></tr>
{{range $k, $v := .Permissions}}<tr><td>Permission</td><td>{{$k}}: {{$v}}</td></tr>{{end}}
</table>
<form method="post" action="{{.Action}}">
<input type="hidden" name="manifest" value="{{.Manifest}}">
<button id="register" type="submit">Register on {{.Server}}</button>
</form></body></html>`))

var donePage = template.Must(template.New("done").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Hangar: {{.Title}}</title></head>
<body><h1 id="result">{{.Title}}</h1><p>{{.Text}}</p>
{{if .Install}}<p><a id="install" href="{{.Install}}">Install {{.Name}} on the repositories the stack serves</a></p>{{end}}
</body></html>`))

// page serves the form that posts the manifest to GitHub.
func (r *run) page(w http.ResponseWriter, req *http.Request) {
	if subtle.ConstantTimeCompare([]byte(req.URL.Query().Get("t")), []byte(r.token)) != 1 {
		http.Error(w, "open the address hangar setup printed", http.StatusForbidden)
		return
	}
	m := r.manifest()
	body, _ := json.Marshal(m) // plain strings and maps: always encodes
	owner := r.o.Org
	if owner == "" {
		owner = "your account (the user signed in to " + r.web + ")"
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = setupPage.Execute(w, map[string]any{"Stack": r.o.Stack.Name, "Name": m.Name, "Owner": owner, "Webhook": m.HookAttributes.URL,
		"Permissions": m.DefaultPermissions, "Action": template.URL(r.formAction()), "Manifest": string(body), "Server": r.web})
}

// created takes GitHub's redirect: the state must be the one sent, and the code is exchanged,
// once, for the App.
func (r *run) created(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(r.state)) != 1 || q.Get("code") == "" {
		r.show(w, http.StatusForbidden, "Not this setup's App", "The address did not come from this setup: nothing was stored.", "")
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		r.show(w, http.StatusGone, "Already done", "This setup has stored its App already.", "")
		return
	}
	res, err := r.store(r.ctx, q.Get("code"))
	if err != nil {
		r.o.Log.Error("register the App", "error", err)
		r.show(w, http.StatusBadGateway, "The App was not stored", err.Error(), "")
		r.failed <- err
		r.done = true
		return
	}
	r.done = true
	r.show(w, http.StatusOK, "Registered "+res.App.Name, fmt.Sprintf("App %d, owned by %s, is stored in the stack's secrets.", res.App.ID, res.App.Owner), res.InstallURL)
	r.result <- res
}

func (r *run) show(w http.ResponseWriter, code int, title, text, install string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = donePage.Execute(w, map[string]string{"Title": title, "Text": text, "Install": install, "Name": r.o.Name})
}

// store exchanges the code, proves the key GitHub returned by acting as the App with it, checks
// the App is the one asked for, and writes the webhook secret, then the App's credentials.
func (r *run) store(ctx context.Context, code string) (Result, error) {
	app, err := ghclient.ConvertManifest(ctx, r.api, r.o.HTTP, code)
	if err != nil {
		return Result{}, err
	}
	if app.PEM == "" || app.WebhookSecret == "" || app.ID < 1 {
		return Result{}, fmt.Errorf("GitHub returned App %d without a key or a webhook secret", app.ID)
	}
	creds := ghapp.Credentials{AppID: app.ID, PrivateKey: app.PEM}
	client, err := ghapp.New(r.api, func(context.Context, bool) (ghapp.Credentials, error) { return creds, nil }, r.o.HTTP.Transport).AppClient()
	if err != nil {
		return Result{}, err
	}
	got, err := client.App(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("act as the new App %d with the key GitHub returned: %w", app.ID, err)
	}
	if err := r.check(got); err != nil {
		return Result{}, err
	}
	if err := r.o.Secrets.Put(ctx, r.o.Stack.WebhookSecretARN, app.WebhookSecret); err != nil {
		return Result{}, fmt.Errorf("store the App's webhook secret: %w", err)
	}
	body, _ := json.Marshal(creds)
	if err := r.o.Secrets.Put(ctx, r.o.Stack.AppSecretARN, string(body)); err != nil {
		return Result{}, fmt.Errorf("store the App's id and key (the webhook secret is stored; run hangar setup again): %w", err)
	}
	r.o.Log.Info("App registered and stored", "app", got.ID, "slug", got.Slug, "owner", got.Owner)
	return Result{App: got, InstallURL: InstallURL(r.web, got.Slug)}, nil
}

// check refuses an App that is not the one this setup asked for: another owner, or fewer
// permissions or events than it needs.
func (r *run) check(app ghapi.App) error {
	if r.o.Org != "" && !strings.EqualFold(app.Owner, r.o.Org) {
		return fmt.Errorf("GitHub registered the App under %s, not the organisation %s asked for: nothing was stored", app.Owner, r.o.Org)
	}
	for k, v := range Permissions(r.o.Stack.OrgScoped) {
		if got := app.Permissions[k]; got != v && got != "write" {
			return fmt.Errorf("the App GitHub registered has %s: %q, not %q: nothing was stored", k, got, v)
		}
	}
	for _, e := range Events {
		if !slices.Contains(app.Events, e) {
			return fmt.Errorf("the App GitHub registered does not subscribe to %s: nothing was stored", e)
		}
	}
	return nil
}

// InstallURL is the page where an App is installed: /apps/<slug>/installations/new on
// github.com, /github-apps/<slug>/installations/new on an enterprise server.
func InstallURL(server, slug string) string {
	server = strings.TrimRight(server, "/")
	if ghurl.APIURL(server) == "https://api.github.com" {
		return server + "/apps/" + slug + "/installations/new"
	}
	return server + "/github-apps/" + slug + "/installations/new"
}
