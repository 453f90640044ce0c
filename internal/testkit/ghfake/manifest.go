package ghfake

import (
	"cmp"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The App's registration as GitHub's manifest flow makes it (docs.github.com, "Registering a
// GitHub App from a manifest"): a form posted to /settings/apps/new (or an organisation's), a
// page where the signed-in user names and creates the App, a redirect to the manifest's
// redirect_url with a one-time code, and POST /app-manifests/{code}/conversions, which returns
// the App's id, key and webhook secret. Then the App's page for installing it, and GET /app.

// manifestCodeTTL is how long a conversion code stays good: GitHub's hour.
const manifestCodeTTL = time.Hour

// firstAppID is the id of the first App the manifest flow creates.
const firstAppID = 900001

// appManifest is the part of a manifest the stand-in reads.
type appManifest struct {
	Name           string `json:"name"`
	URL            string `json:"url"`
	HookAttributes struct {
		URL    string `json:"url"`
		Active *bool  `json:"active"`
	} `json:"hook_attributes"`
	RedirectURL        string            `json:"redirect_url"`
	Description        string            `json:"description"`
	Public             bool              `json:"public"`
	DefaultEvents      []string          `json:"default_events"`
	DefaultPermissions map[string]string `json:"default_permissions"`
}

// CreatedApp is an App the manifest flow registered, as its conversion returned it.
type CreatedApp struct {
	ID                   int64
	Slug, Name, Owner    string
	OwnerIsOrg           bool
	PEM, WebhookSecret   string
	ClientID, ClientSecr string
	HookURL              string
	Public               bool
	Permissions          map[string]string
	Events               []string
	created              time.Time
}

// manifestCode is a conversion code: good once, for an hour.
type manifestCode struct {
	app     int // index in Server.created
	expires time.Time
	used    bool
}

// appMeta is what GET /app says of the App: set by the manifest flow, or the defaults of an App
// EnableApp made (Hangar's permissions, the workflow_job event).
type appMeta struct {
	name, slug, owner string
	ownerIsOrg        bool
	permissions       map[string]string
	events            []string
	created           time.Time
}

// SetUser names the user signed in to the stand-in's pages (default "octocat"): a manifest posted
// to /settings/apps/new makes an App that user owns.
func (s *Server) SetUser(login string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.user = login
}

// AddRepos makes repositories (owner/name) known to the stand-in's pages: the App's installation
// page offers them.
func (s *Server) AddRepos(repos ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range repos {
		if !slices.Contains(s.knownRepos, r) {
			s.knownRepos = append(s.knownRepos, r)
		}
	}
}

// CreatedApps returns the Apps the manifest flow registered, oldest first.
func (s *Server) CreatedApps() []CreatedApp {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.created)
}

// SetAppPermission sets the App's permission name to level ("read", "write"), or removes it
// (""), as editing the App's settings does; GET /app shows it, and installations made after it.
func (s *Server) SetAppPermission(name, level string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.meta()
	if level == "" {
		delete(m.permissions, name)
		return
	}
	m.permissions[name] = level
}

// SetAppEvents sets the events the App subscribes to.
func (s *Server) SetAppEvents(events ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.meta().events = slices.Clone(events)
}

// meta returns the App's metadata, made with the defaults when the App has none. The caller
// holds s.mu.
func (s *Server) meta() *appMeta {
	if s.appInfo == nil {
		perms := map[string]string{}
		for k, v := range installationPermissions {
			perms[k] = v
		}
		s.appInfo = &appMeta{name: "hangar", slug: "hangar", owner: "octo", permissions: perms, events: []string{"workflow_job"}, created: s.now()}
	}
	return s.appInfo
}

func (s *Server) manifestFlow(mux *http.ServeMux) {
	mux.HandleFunc("POST /settings/apps/new", s.newAppPage)
	mux.HandleFunc("POST /organizations/{org}/settings/apps/new", s.newAppPage)
	mux.HandleFunc("POST /settings/apps/new/create", s.createApp)
	mux.HandleFunc("POST /app-manifests/{code}/conversions", s.convertManifest)
	mux.HandleFunc("GET /app", s.asApp(s.getApp))
	mux.HandleFunc("GET /app/hook/config", s.asApp(s.getHookConfig))
	for _, base := range []string{"/apps/{slug}/installations/new", "/github-apps/{slug}/installations/new"} {
		mux.HandleFunc("GET "+base, s.installPage)
		mux.HandleFunc("POST "+base, s.installApp)
	}
}

var pageTemplates = template.Must(template.New("confirm").Parse(`<!doctype html>
<html><head><title>Create GitHub App</title></head><body>
<h1>Create GitHub App for {{.Owner}}</h1>
<form method="post" action="/settings/apps/new/create">
<input type="hidden" name="manifest" value="{{.Manifest}}">
<input type="hidden" name="state" value="{{.State}}">
<input type="hidden" name="owner" value="{{.Owner}}">
<input type="hidden" name="org" value="{{.Org}}">
<label>GitHub App name <input id="name" name="name" value="{{.Name}}"></label>
<p>Webhook: {{.Hook}}</p>
<ul>{{range $k, $v := .Permissions}}<li>{{$k}}: {{$v}}</li>{{end}}</ul>
<button id="create" type="submit">Create GitHub App for {{.Owner}}</button>
</form></body></html>`))

var installTemplate = template.Must(template.New("install").Parse(`<!doctype html>
<html><head><title>Install {{.Name}}</title></head><body>
<h1>Install {{.Name}}</h1>
<form method="post">
<label>Account <select id="account" name="account">{{range .Accounts}}<option value="{{.}}">{{.}}</option>{{end}}</select></label>
<label><input type="radio" name="selection" value="all"> All repositories</label>
<label><input type="radio" id="selected" name="selection" value="selected" checked> Only select repositories</label>
{{range .Repos}}<label><input type="checkbox" name="repo" value="{{.}}" id="repo-{{.}}"> {{.}}</label>{{end}}
<button id="install" type="submit">Install</button>
</form></body></html>`))

var resultTemplate = template.Must(template.New("result").Parse(`<!doctype html>
<html><head><title>{{.Title}}</title></head><body><h1 id="result">{{.Title}}</h1><p>{{.Text}}</p></body></html>`))

// newAppPage serves the form a manifest is posted with: the page where the signed-in user names
// the App and creates it.
func (s *Server) newAppPage(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		pageError(w, http.StatusBadRequest, "the form: "+err.Error())
		return
	}
	var m appManifest
	if err := json.Unmarshal([]byte(r.PostForm.Get("manifest")), &m); err != nil {
		pageError(w, http.StatusUnprocessableEntity, "the manifest is not JSON: "+err.Error())
		return
	}
	org := r.PathValue("org")
	s.mu.Lock()
	owner := s.user
	s.mu.Unlock()
	if org != "" {
		owner = org
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = pageTemplates.Execute(w, map[string]any{"Owner": owner, "Org": org, "Manifest": r.PostForm.Get("manifest"),
		"State": r.URL.Query().Get("state"), "Name": m.Name, "Hook": m.HookAttributes.URL, "Permissions": m.DefaultPermissions})
}

// appName is what GitHub accepts as an App's name.
var appName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 ._-]{0,33}$`)

// createApp registers the App the confirmation page describes and redirects to the manifest's
// redirect_url with a conversion code and the state the form was posted with.
func (s *Server) createApp(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		pageError(w, http.StatusBadRequest, "the form: "+err.Error())
		return
	}
	var m appManifest
	if err := json.Unmarshal([]byte(r.PostForm.Get("manifest")), &m); err != nil {
		pageError(w, http.StatusUnprocessableEntity, "the manifest is not JSON")
		return
	}
	name := strings.TrimSpace(r.PostForm.Get("name"))
	redirect, err := url.Parse(m.RedirectURL)
	switch {
	case !appName.MatchString(name):
		pageError(w, http.StatusUnprocessableEntity, "Name is invalid: at most 34 letters, digits, spaces, dots, dashes or underscores")
		return
	case m.URL == "":
		pageError(w, http.StatusUnprocessableEntity, "Homepage URL can't be blank")
		return
	case (m.HookAttributes.Active == nil || *m.HookAttributes.Active) && m.HookAttributes.URL == "":
		pageError(w, http.StatusUnprocessableEntity, "Webhook URL can't be blank")
		return
	case err != nil || m.RedirectURL == "" || (redirect.Scheme != "http" && redirect.Scheme != "https"):
		pageError(w, http.StatusUnprocessableEntity, "redirect_url must be an http(s) URL")
		return
	}
	for k, v := range m.DefaultPermissions {
		if v != "read" && v != "write" && v != "admin" {
			pageError(w, http.StatusUnprocessableEntity, fmt.Sprintf("permission %s: %q is not read, write or admin", k, v))
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	slug := slugOf(name)
	if slices.ContainsFunc(s.created, func(a CreatedApp) bool { return a.Slug == slug }) {
		pageError(w, http.StatusUnprocessableEntity, "Name has already been taken")
		return
	}
	key := newAppKey()
	app := CreatedApp{ID: firstAppID + int64(len(s.created)), Slug: slug, Name: name, Owner: r.PostForm.Get("owner"),
		OwnerIsOrg: r.PostForm.Get("org") != "", HookURL: m.HookAttributes.URL, Public: m.Public,
		PEM:           string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})),
		WebhookSecret: randomHex(20), ClientID: "Iv1." + randomHex(8), ClientSecr: randomHex(20),
		Permissions: map[string]string{}, Events: slices.Clone(m.DefaultEvents), created: s.now()}
	for k, v := range m.DefaultPermissions {
		app.Permissions[k] = v
	}
	app.Permissions["metadata"] = cmp.Or(app.Permissions["metadata"], "read") // every App has it
	s.created = append(s.created, app)
	// The stand-in plays one App: the newest registered.
	s.app = &appKey{id: app.ID, keys: []*rsa.PublicKey{&key.PublicKey}}
	s.appInfo = &appMeta{name: name, slug: slug, owner: app.Owner, ownerIsOrg: app.OwnerIsOrg, permissions: app.Permissions,
		events: app.Events, created: app.created}
	if app.OwnerIsOrg {
		s.orgs[strings.ToLower(app.Owner)] = true
	}
	if m.HookAttributes.Active == nil || *m.HookAttributes.Active {
		s.hook = &hook{url: app.HookURL, secret: app.WebhookSecret}
	}
	code := randomHex(10)
	s.codes[code] = &manifestCode{app: len(s.created) - 1, expires: s.now().Add(manifestCodeTTL)}
	q := redirect.Query()
	q.Set("code", code)
	if st := r.PostForm.Get("state"); st != "" {
		q.Set("state", st)
	}
	redirect.RawQuery = q.Encode()
	http.Redirect(w, r, redirect.String(), http.StatusFound)
}

// convertManifest serves POST /app-manifests/{code}/conversions: the App a code was issued for,
// with its credentials, once.
func (s *Server) convertManifest(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.codes[r.PathValue("code")]
	if c == nil || c.used || !s.now().Before(c.expires) {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	c.used = true
	app := s.created[c.app]
	meta := appMeta{name: app.Name, slug: app.Slug, owner: app.Owner, ownerIsOrg: app.OwnerIsOrg, permissions: app.Permissions,
		events: app.Events, created: app.created}
	out := s.integration(app.ID, &meta, r)
	out["client_id"], out["client_secret"], out["webhook_secret"], out["pem"] = app.ClientID, app.ClientSecr, app.WebhookSecret, app.PEM
	writeJSON(w, http.StatusCreated, out)
}

// getApp serves GET /app to the App's JWT.
func (s *Server) getApp(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.integration(s.app.id, s.meta(), r))
}

// getHookConfig serves GET /app/hook/config to the App's JWT: where its deliveries go (the
// secret obfuscated, as GitHub shows it).
func (s *Server) getHookConfig(w http.ResponseWriter, _ *http.Request) {
	out := map[string]any{"content_type": "json", "insecure_ssl": "0", "url": "", "secret": nil}
	if s.hook != nil {
		out["url"], out["secret"] = s.hook.url, "********"
	}
	writeJSON(w, http.StatusOK, out)
}

// integration is an App in GitHub's shape (the "integration" schema). The caller holds s.mu.
func (s *Server) integration(id int64, m *appMeta, r *http.Request) map[string]any {
	web := "http://" + r.Host
	ownerType := "User"
	if m.ownerIsOrg || s.orgs[strings.ToLower(m.owner)] {
		ownerType = "Organization"
	}
	return map[string]any{
		"id": id, "slug": m.slug, "node_id": fmt.Sprintf("A_fake%d", id), "client_id": fmt.Sprintf("Iv1.fake%d", id),
		"owner": simpleAccount(web, m.owner, ownerType), "name": m.name, "description": "",
		"external_url": "https://github.com/hangar-ci/hangar", "html_url": web + "/apps/" + m.slug,
		"created_at": stamp(m.created), "updated_at": stamp(m.created),
		"permissions": m.permissions, "events": m.events, "installations_count": len(s.installs),
	}
}

// simpleAccount is a user or organisation in GitHub's "simple-user" shape.
func simpleAccount(web, login, kind string) map[string]any {
	api := web + "/users/" + login
	return map[string]any{
		"login": login, "id": stableID(strings.ToLower(login)), "node_id": "U_fake" + login, "avatar_url": web + "/avatars/" + login,
		"gravatar_id": "", "url": api, "html_url": web + "/" + login, "followers_url": api + "/followers",
		"following_url": api + "/following{/other_user}", "gists_url": api + "/gists{/gist_id}", "starred_url": api + "/starred{/owner}{/repo}",
		"subscriptions_url": api + "/subscriptions", "organizations_url": api + "/orgs", "repos_url": api + "/repos",
		"events_url": api + "/events{/privacy}", "received_events_url": api + "/received_events", "type": kind, "site_admin": false,
	}
}

// installPage serves the App's page for installing it: the signed-in user's account and the
// organisations the stand-in knows, and the repositories it knows.
func (s *Server) installPage(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.appInfo == nil || s.appInfo.slug != r.PathValue("slug") {
		pageError(w, http.StatusNotFound, "no App "+r.PathValue("slug"))
		return
	}
	accounts := []string{s.user}
	for _, repo := range s.knownRepos {
		if o := Scope(repo).Org(); !slices.Contains(accounts, o) {
			accounts = append(accounts, o)
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = installTemplate.Execute(w, map[string]any{"Name": s.appInfo.name, "Accounts": accounts, "Repos": s.knownRepos})
}

// installApp installs the App on the chosen account: on every repository, or the chosen ones of
// that account.
func (s *Server) installApp(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		pageError(w, http.StatusBadRequest, "the form: "+err.Error())
		return
	}
	account := r.PostForm.Get("account")
	var repos []string
	if r.PostForm.Get("selection") == "selected" {
		for _, repo := range r.PostForm["repo"] {
			if strings.EqualFold(Scope(repo).Org(), account) {
				repos = append(repos, repo)
			}
		}
		if len(repos) == 0 {
			pageError(w, http.StatusUnprocessableEntity, "choose at least one repository of "+account)
			return
		}
	}
	id := s.Install(account, repos...)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = resultTemplate.Execute(w, map[string]string{"Title": "Installed", "Text": fmt.Sprintf("installation %d on %s", id, account)})
}

// pageError answers a page's request with an error page.
func pageError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = resultTemplate.Execute(w, map[string]string{"Title": "Error", "Text": msg})
}

// slugOf is the App's slug: its name in lower case, runs of other characters as one dash.
func slugOf(name string) string {
	return strings.Trim(notSlug.ReplaceAllString(strings.ToLower(name), "-"), "-")
}

// notSlug is what a slug turns into one dash.
var notSlug = regexp.MustCompile(`[^a-z0-9]+`)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
