// Package ghclient is Hangar's GitHub REST client (go-github) for one scope: runner registration
// tokens, just-in-time runners, listing and deleting self-hosted runners, for a repository or an
// organisation. It mints no remove token: runners leave GitHub by DeleteRunner, with the
// workflow's credential (or the App's). Its errors that callers tell apart are *ghapi.Error.
package ghclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/go-github/v66/github"

	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
)

// Client is a GitHub client bound to one scope.
type Client struct {
	gh    *github.Client
	scope ghapi.Scope
}

// New returns a client for apiURL (https://api.github.com, or the GITHUB_API_URL of an enterprise
// server) authenticated with token, bound to scope.
func New(apiURL, token string, scope ghapi.Scope) (*Client, error) {
	return newClient(apiURL, github.NewClient(nil).WithAuthToken(token), scope)
}

// NewWithHTTP returns a client for apiURL bound to scope that sends its requests through hc,
// which authenticates them (a GitHub App installation's transport: package ghapp).
func NewWithHTTP(apiURL string, hc *http.Client, scope ghapi.Scope) (*Client, error) {
	return newClient(apiURL, github.NewClient(hc), scope)
}

func newClient(apiURL string, gh *github.Client, scope ghapi.Scope) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(apiURL, "/") + "/")
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("GitHub API URL %q: want a URL such as https://api.github.com", apiURL)
	}
	gh.BaseURL = u
	return &Client{gh: gh, scope: scope}, nil
}

// Scope returns the client's scope.
func (c *Client) Scope() ghapi.Scope { return c.scope }

// RegistrationToken mints a runner registration token (valid one hour).
func (c *Client) RegistrationToken(ctx context.Context) (ghapi.Token, error) {
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
	org func(context.Context, string) (T, *github.Response, error)) (ghapi.Token, error) {
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
		return ghapi.Token{}, fmt.Errorf("create a runner %s token for %s: %w", kind, c.scope, classify(err))
	}
	return ghapi.Token{Value: t.GetToken(), ExpiresAt: t.GetExpiresAt().Time}, nil
}

// Runners lists every self-hosted runner of the scope (every page).
func (c *Client) Runners(ctx context.Context) ([]ghapi.Runner, error) {
	var out []ghapi.Runner
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
			return nil, fmt.Errorf("list the runners of %s: %w", c.scope, classify(err))
		}
		for _, r := range page.Runners {
			x := ghapi.Runner{ID: r.GetID(), Name: r.GetName(), Status: r.GetStatus(), Busy: r.GetBusy()}
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

// DeleteRunner removes a runner from the scope. A runner that is gone already (404) is deleted:
// every caller would treat it so.
func (c *Client) DeleteRunner(ctx context.Context, id int64) error {
	var err error
	if c.scope.Repo != "" {
		_, err = c.gh.Actions.RemoveRunner(ctx, c.scope.Owner, c.scope.Repo, id)
	} else {
		_, err = c.gh.Actions.RemoveOrganizationRunner(ctx, c.scope.Owner, id)
	}
	if err = classify(err); err != nil && !ghapi.IsNotFound(err) {
		return fmt.Errorf("delete runner %d of %s: %w", id, c.scope, err)
	}
	return nil
}

// GenerateJITConfig registers a just-in-time runner in the client's scope and returns its
// configuration.
func (c *Client) GenerateJITConfig(ctx context.Context, r ghapi.JITRequest) (ghapi.JIT, error) {
	req := &github.GenerateJITConfigRequest{Name: r.Name, RunnerGroupID: r.GroupID, Labels: r.Labels}
	if r.WorkFolder != "" {
		req.WorkFolder = &r.WorkFolder
	}
	var (
		out *github.JITRunnerConfig
		err error
	)
	if c.scope.Repo != "" {
		out, _, err = c.gh.Actions.GenerateRepoJITConfig(ctx, c.scope.Owner, c.scope.Repo, req)
	} else {
		out, _, err = c.gh.Actions.GenerateOrgJITConfig(ctx, c.scope.Owner, req)
	}
	if err != nil {
		return ghapi.JIT{}, fmt.Errorf("make just-in-time runner %s in %s: %w", r.Name, c.scope, classify(err))
	}
	if out.GetEncodedJITConfig() == "" || out.GetRunner().GetID() == 0 {
		return ghapi.JIT{}, fmt.Errorf("make just-in-time runner %s in %s: %w", r.Name, c.scope, ghapi.ErrNoConfig)
	}
	return ghapi.JIT{RunnerID: out.GetRunner().GetID(), Config: out.GetEncodedJITConfig()}, nil
}

// RepositoryGroup returns the id of the organisation's runner group named name, open to the
// repository repoID alone, making it when the organisation has no group of that name. A group of
// that name open to anything more (or less) is refused with ghapi.ErrGroupNotOwn: its runners
// could serve another repository's jobs. Groups are made without public repositories, GitHub's
// own default.
func (c *Client) RepositoryGroup(ctx context.Context, name string, repoID int64) (int64, error) {
	if c.scope.Repo != "" {
		return ghapi.RepositoryGroupID, nil
	}
	g, err := c.groupNamed(ctx, name)
	if err != nil {
		return 0, err
	}
	if g == nil {
		g, _, err = c.gh.Actions.CreateOrganizationRunnerGroup(ctx, c.scope.Owner, github.CreateRunnerGroupRequest{
			Name: &name, Visibility: github.String("selected"), SelectedRepositoryIDs: []int64{repoID},
			AllowsPublicRepositories: github.Bool(false)})
		if err == nil {
			return g.GetID(), nil
		}
		// A name taken answers 409 or 422 (the description does not say which).
		if err = classify(err); !ghapi.IsConflict(err) && !ghapi.IsBusy(err) {
			return 0, fmt.Errorf("make runner group %q of %s: %w", name, c.scope.Owner, err)
		}
		// Made meanwhile by another dispatcher: read it, and check it as any other.
		if g, err = c.groupNamed(ctx, name); err != nil || g == nil {
			return 0, fmt.Errorf("make runner group %q of %s: taken, yet not listed: %w", name, c.scope.Owner, err)
		}
	}
	if g.GetVisibility() != "selected" {
		return 0, fmt.Errorf("runner group %q of %s is open to %s repositories: %w", name, c.scope.Owner, g.GetVisibility(), ghapi.ErrGroupNotOwn)
	}
	repos, _, err := c.gh.Actions.ListRepositoryAccessRunnerGroup(ctx, c.scope.Owner, g.GetID(), &github.ListOptions{PerPage: 2})
	if err != nil {
		return 0, fmt.Errorf("list the repositories of runner group %q of %s: %w", name, c.scope.Owner, classify(err))
	}
	if repos.GetTotalCount() != 1 || len(repos.Repositories) != 1 || repos.Repositories[0].GetID() != repoID {
		return 0, fmt.Errorf("runner group %q of %s is open to %d repositories, not repository %d alone: %w", name, c.scope.Owner,
			repos.GetTotalCount(), repoID, ghapi.ErrGroupNotOwn)
	}
	return g.GetID(), nil
}

// groupNamed returns the organisation's runner group named name, or nil.
func (c *Client) groupNamed(ctx context.Context, name string) (*github.RunnerGroup, error) {
	opts := &github.ListOrgRunnerGroupOptions{ListOptions: github.ListOptions{PerPage: 100}}
	for {
		page, resp, err := c.gh.Actions.ListOrganizationRunnerGroups(ctx, c.scope.Owner, opts)
		if err != nil {
			return nil, fmt.Errorf("list the runner groups of %s: %w", c.scope.Owner, classify(err))
		}
		for _, g := range page.RunnerGroups {
			if g.GetName() == name {
				return g, nil
			}
		}
		if resp.NextPage == 0 {
			return nil, nil
		}
		opts.Page = resp.NextPage
	}
}

// RunnerByName returns the scope's runner named name, or an error that IsNotFound reports.
func (c *Client) RunnerByName(ctx context.Context, name string) (ghapi.Runner, error) {
	all, err := c.Runners(ctx)
	if err != nil {
		return ghapi.Runner{}, err
	}
	for _, r := range all {
		if r.Name == name {
			return r, nil
		}
	}
	return ghapi.Runner{}, &ghapi.Error{Status: http.StatusNotFound, Err: fmt.Errorf("runner %s not found in %s", name, c.scope)}
}

// classify turns go-github's answers into *ghapi.Error (status, rate limit); any other error (no
// answer: the network) is returned as it is.
func classify(err error) error {
	var r *github.RateLimitError
	var a *github.AbuseRateLimitError
	var e *github.ErrorResponse
	switch {
	case err == nil:
		return nil
	case errors.As(err, &r) || errors.As(err, &a):
		return &ghapi.Error{Status: http.StatusForbidden, RateLimited: true, Err: err}
	case errors.As(err, &e) && e.Response != nil:
		return &ghapi.Error{Status: e.Response.StatusCode, Err: err}
	}
	return err
}
