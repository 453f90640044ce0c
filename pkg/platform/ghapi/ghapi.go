// Package ghapi is the part of the GitHub REST API Hangar uses: runner registration tokens,
// just-in-time runner configurations, listing and deleting self-hosted runners, for a repository
// or an organisation. It mints no
// remove token: runners leave GitHub by DeleteRunner, with the workflow's credential. It wraps
// go-github behind a narrow interface so that provision and release depend on what they call,
// not on the whole client.
package ghapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/go-github/v66/github"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// Token is a runner registration token.
type Token struct {
	Value     string
	ExpiresAt time.Time
}

// Runner is a registered self-hosted runner.
type Runner struct {
	ID     int64
	Name   string
	Status string // online or offline
	Busy   bool
	Labels []string
}

// Scope is where runners are registered: a repository (owner/name) or an organisation.
type Scope struct {
	Owner string
	Repo  string // empty for an organisation
}

// The kinds of scope ParseScope takes.
const (
	ScopeRepo = "repo"
	ScopeOrg  = "org"
)

// ErrScopeKind is returned (wrapped) by ParseScope for a kind other than repo or org.
var ErrScopeKind = errors.New("want repo or org")

// ParseScope returns the scope of repository owner/name for kind "repo" or "org".
func ParseScope(repository, kind string) (Scope, error) {
	switch kind {
	case ScopeRepo, "", ScopeOrg:
	default:
		return Scope{}, fmt.Errorf("runner-scope %q: %w", kind, ErrScopeKind)
	}
	if err := pooldoc.ValidateRepository(repository); err != nil {
		return Scope{}, err
	}
	owner, name, _ := strings.Cut(repository, "/")
	if kind == ScopeOrg {
		return Scope{Owner: owner}, nil
	}
	return Scope{Owner: owner, Repo: name}, nil
}

// IsOrg reports whether runners of the scope belong to the organisation.
func (s Scope) IsOrg() bool { return s.Repo == "" }

// String is owner/name or owner.
func (s Scope) String() string {
	if s.Repo == "" {
		return s.Owner
	}
	return s.Owner + "/" + s.Repo
}

// RunnerURL is the URL runners of the scope register with, on the GitHub server serverURL
// (https://github.com, or an enterprise server).
func (s Scope) RunnerURL(serverURL string) string {
	return strings.TrimRight(serverURL, "/") + "/" + s.String()
}

// Client is a GitHub client bound to one scope.
type Client struct {
	gh    *github.Client
	scope Scope
}

// New returns a client for apiURL (https://api.github.com, or the GITHUB_API_URL of an enterprise
// server) authenticated with token, bound to scope.
func New(apiURL, token string, scope Scope) (*Client, error) {
	return newClient(apiURL, github.NewClient(nil).WithAuthToken(token), scope)
}

// NewWithHTTP returns a client for apiURL bound to scope that sends its requests through hc,
// which authenticates them (a GitHub App installation's transport: package ghapp).
func NewWithHTTP(apiURL string, hc *http.Client, scope Scope) (*Client, error) {
	return newClient(apiURL, github.NewClient(hc), scope)
}

func newClient(apiURL string, gh *github.Client, scope Scope) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(apiURL, "/") + "/")
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("GitHub API URL %q: want a URL such as https://api.github.com", apiURL)
	}
	gh.BaseURL = u
	return &Client{gh: gh, scope: scope}, nil
}

// Scope returns the client's scope.
func (c *Client) Scope() Scope { return c.scope }

// RegistrationToken mints a runner registration token (valid one hour).
func (c *Client) RegistrationToken(ctx context.Context) (Token, error) {
	return mint(ctx, c, "registration", c.gh.Actions.CreateRegistrationToken, c.gh.Actions.CreateOrganizationRegistrationToken)
}

// apiToken is what go-github's runner tokens have in common.
type apiToken interface {
	GetToken() string
	GetExpiresAt() github.Timestamp
}

// mint asks for a token of kind for the client's scope, through the repository or the
// organisation endpoint.
func mint[T apiToken](ctx context.Context, c *Client, kind string,
	repo func(context.Context, string, string) (T, *github.Response, error),
	org func(context.Context, string) (T, *github.Response, error)) (Token, error) {
	var (
		t   T
		err error
	)
	if c.scope.Repo != "" {
		t, _, err = repo(ctx, c.scope.Owner, c.scope.Repo)
	} else {
		t, _, err = org(ctx, c.scope.Owner)
	}
	if err != nil {
		return Token{}, fmt.Errorf("create a runner %s token for %s: %w", kind, c.scope, err)
	}
	return Token{Value: t.GetToken(), ExpiresAt: t.GetExpiresAt().Time}, nil
}

// Runners lists every self-hosted runner of the scope (every page).
func (c *Client) Runners(ctx context.Context) ([]Runner, error) {
	var out []Runner
	opts := &github.ListRunnersOptions{ListOptions: github.ListOptions{PerPage: 100}}
	for {
		var (
			page *github.Runners
			resp *github.Response
			err  error
		)
		if c.scope.Repo != "" {
			page, resp, err = c.gh.Actions.ListRunners(ctx, c.scope.Owner, c.scope.Repo, opts)
		} else {
			page, resp, err = c.gh.Actions.ListOrganizationRunners(ctx, c.scope.Owner, opts)
		}
		if err != nil {
			return nil, fmt.Errorf("list the runners of %s: %w", c.scope, err)
		}
		for _, r := range page.Runners {
			x := Runner{ID: r.GetID(), Name: r.GetName(), Status: r.GetStatus(), Busy: r.GetBusy()}
			for _, l := range r.Labels {
				x.Labels = append(x.Labels, l.GetName())
			}
			out = append(out, x)
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
}

// DeleteRunner removes a runner from the scope.
func (c *Client) DeleteRunner(ctx context.Context, id int64) error {
	var err error
	if c.scope.Repo != "" {
		_, err = c.gh.Actions.RemoveRunner(ctx, c.scope.Owner, c.scope.Repo, id)
	} else {
		_, err = c.gh.Actions.RemoveOrganizationRunner(ctx, c.scope.Owner, id)
	}
	if err != nil {
		return fmt.Errorf("delete runner %d of %s: %w", id, c.scope, err)
	}
	return nil
}
