//go:build localworld

// The stand-in GitHub is plain http on a loopback address, which only the local world's builds
// accept as a GitHub server (ghurl).

package setup_test

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
	"github.com/hangar-ci/hangar/pkg/operator"
	"github.com/hangar-ci/hangar/pkg/operator/setup"
	"github.com/hangar-ci/hangar/pkg/platform/ghapp"
)

// secrets records what setup puts.
type secrets struct {
	mu   sync.Mutex
	puts map[string]string
}

func (s *secrets) Put(_ context.Context, arn, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.puts[arn] = value
	return nil
}

func (s *secrets) got() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, v := range s.puts {
		out[k] = v
	}
	return out
}

// noRedirect is a client that stops at GitHub's redirect, as a test of the redirect wants.
var noRedirect = &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// started is a setup serving its page.
type started struct {
	page   string
	sec    *secrets
	result chan error
	res    *setup.Result
}

func start(t *testing.T, gh *ghfake.Server, org string) *started {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	s := &started{sec: &secrets{puts: map[string]string{}}, result: make(chan error, 1)}
	ready := make(chan string, 1)
	go func() {
		res, err := setup.Run(ctx, setup.Options{Org: org, Secrets: s.sec, HTTP: gh.HTTPClient(), Ready: func(u string) { ready <- u },
			Stack: setup.Stack{Name: "prod", GitHubURL: gh.URL(), WebhookURL: "https://hook.example/", AppSecretARN: "app", WebhookSecretARN: "hook"}})
		s.res = res
		s.result <- err
	}()
	select {
	case s.page = <-ready:
	case err := <-s.result:
		t.Fatalf("setup ended before serving its page: %v", err)
	}
	return s
}

// manifestForm reads the page's form: where it posts and the manifest.
func manifestForm(t *testing.T, page string) (string, string) {
	t.Helper()
	resp, err := noRedirect.Get(page)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, _ := io.ReadAll(resp.Body)
	action := regexp.MustCompile(`action="([^"]+)"`).FindStringSubmatch(string(b))
	manifest := regexp.MustCompile(`name="manifest" value="([^"]+)"`).FindStringSubmatch(string(b))
	require.NotNil(t, action)
	require.NotNil(t, manifest)
	return html.UnescapeString(action[1]), html.UnescapeString(manifest[1])
}

// confirm plays the user confirming the App on GitHub as owner, and returns where GitHub sends
// the browser back to.
func confirm(t *testing.T, gh *ghfake.Server, action, manifest, owner, org string) string {
	t.Helper()
	u, err := url.Parse(action)
	require.NoError(t, err)
	var m struct{ Name string }
	require.NoError(t, json.Unmarshal([]byte(manifest), &m))
	resp, err := noRedirect.PostForm(gh.URL()+"/settings/apps/new/create", url.Values{"manifest": {manifest}, "state": {u.Query().Get("state")},
		"owner": {owner}, "org": {org}, "name": {m.Name}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusFound, resp.StatusCode)
	return resp.Header.Get("Location")
}

// TestSetupStoresTheAppGitHubReturned: the manifest asks for a private App with the one event,
// the permissions and the stack's webhook; the code is exchanged once and the secrets hold what
// GitHub returned; a second use of the address is refused.
func TestSetupStoresTheAppGitHubReturned(t *testing.T) {
	gh := ghfake.New()
	defer gh.Close()
	s := start(t, gh, "")
	action, manifest := manifestForm(t, s.page)
	require.True(t, strings.HasPrefix(action, gh.URL()+"/settings/apps/new?state="), action)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(manifest), &m))
	require.Equal(t, false, m["public"])
	require.Equal(t, []any{"workflow_job"}, m["default_events"])
	require.Equal(t, map[string]any{"url": "https://hook.example/", "active": true}, m["hook_attributes"])
	require.Equal(t, map[string]any{"actions": "read", "administration": "write", "metadata": "read"}, m["default_permissions"])

	back := confirm(t, gh, action, manifest, "octocat", "")
	resp, err := noRedirect.Get(back)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, <-s.result)
	app := gh.CreatedApps()[0]
	require.Equal(t, "octocat", s.res.App.Owner)
	puts := s.sec.got()
	require.Equal(t, app.WebhookSecret, puts["hook"])
	creds, err := ghapp.ParseCredentials(puts["app"])
	require.NoError(t, err)
	require.Equal(t, ghapp.Credentials{AppID: app.ID, PrivateKey: app.PEM}, creds)
}

// TestSetupRefusesWhatIsNotItsOwn: the page answers only at its own host and with its token; the
// way back answers only with the state it sent; an App GitHub registered under another owner than
// the organisation asked for is refused, and nothing is stored.
func TestSetupRefusesWhatIsNotItsOwn(t *testing.T) {
	gh := ghfake.New()
	defer gh.Close()
	s := start(t, gh, "octo")
	u, err := url.Parse(s.page)
	require.NoError(t, err)

	noToken, err := noRedirect.Get("http://" + u.Host + "/")
	require.NoError(t, err)
	noToken.Body.Close()
	require.Equal(t, http.StatusForbidden, noToken.StatusCode)

	req, _ := http.NewRequest(http.MethodGet, s.page, nil)
	req.Host = "rebound.example:" + u.Port() // a page that rebinds its own name to 127.0.0.1
	other, err := noRedirect.Do(req)
	require.NoError(t, err)
	other.Body.Close()
	require.Equal(t, http.StatusMisdirectedRequest, other.StatusCode)

	action, manifest := manifestForm(t, s.page)
	require.True(t, strings.HasPrefix(action, gh.URL()+"/organizations/octo/settings/apps/new?state="), action)
	// A code from another flow, with a guessed state: refused before it is exchanged.
	forged, err := noRedirect.Get("http://" + u.Host + "/created?code=abc&state=" + strings.Repeat("0", 64))
	require.NoError(t, err)
	forged.Body.Close()
	require.Equal(t, http.StatusForbidden, forged.StatusCode)

	// The user confirmed it under their own account instead of the organisation.
	back := confirm(t, gh, action, manifest, "octocat", "")
	resp, err := noRedirect.Get(back)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadGateway, resp.StatusCode)
	err = <-s.result
	require.ErrorContains(t, err, "not the organisation octo asked for")
	require.Empty(t, s.sec.got(), "nothing stored")
}

// TestSetupInput: bad input is refused before anything is served, naming the flag.
func TestSetupInput(t *testing.T) {
	err := setup.CheckInput("prod", "bad org", "", 0)
	require.ErrorIs(t, err, operator.ErrBadInput)
	require.ErrorContains(t, err, `--org "bad org"`)
	err = setup.CheckInput("prod", "", strings.Repeat("n", 35), 0)
	require.ErrorContains(t, err, "--name")
	require.NoError(t, setup.CheckInput("prod", "octo-org", "", 0))
	require.Equal(t, "https://github.com/apps/hangar-prod/installations/new", setup.InstallURL("https://github.com", "hangar-prod"))
	require.Equal(t, "https://ghe.example/github-apps/hangar-prod/installations/new", setup.InstallURL("https://ghe.example", "hangar-prod"))
}
