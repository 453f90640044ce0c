package ghclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/go-github/v66/github"

	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
)

// The App's registration: the manifest flow's code exchange, and the App as GitHub describes it.

// ConvertManifest exchanges a manifest flow's code for the App it registered and its
// credentials (POST /app-manifests/{code}/conversions, unauthenticated; a code is good once, for
// an hour).
func ConvertManifest(ctx context.Context, apiURL string, hc *http.Client, code string) (ghapi.NewApp, error) {
	c, err := newClient(apiURL, github.NewClient(hc), ghapi.Scope{})
	if err != nil {
		return ghapi.NewApp{}, err
	}
	cfg, _, err := c.gh.Apps.CompleteAppManifest(ctx, code)
	if err != nil {
		return ghapi.NewApp{}, fmt.Errorf("exchange the manifest flow's code for the App: %w", classify(err))
	}
	owner := cfg.GetOwner()
	return ghapi.NewApp{
		App: ghapi.App{ID: cfg.GetID(), Slug: cfg.GetSlug(), Name: cfg.GetName(), Owner: owner.GetLogin(), OwnerType: owner.GetType(),
			HTMLURL: cfg.GetHTMLURL()},
		PEM: cfg.GetPEM(), WebhookSecret: cfg.GetWebhookSecret(),
	}, nil
}

// App returns the App the client acts as (GET /app).
func (a *AppClient) App(ctx context.Context) (ghapi.App, error) {
	app, _, err := a.gh.Apps.Get(ctx, "")
	if err != nil {
		return ghapi.App{}, fmt.Errorf("read the App (GET /app): %w", classify(err))
	}
	perms, err := permissionMap(app.GetPermissions())
	if err != nil {
		return ghapi.App{}, err
	}
	return ghapi.App{ID: app.GetID(), Slug: app.GetSlug(), Name: app.GetName(), Owner: app.GetOwner().GetLogin(),
		OwnerType: app.GetOwner().GetType(), HTMLURL: app.GetHTMLURL(), Permissions: perms, Events: app.Events}, nil
}

// permissionMap turns go-github's permissions into GitHub's own names and levels
// (administration: write, …), leaving out those not granted.
func permissionMap(p *github.InstallationPermissions) (map[string]string, error) {
	out := map[string]string{}
	if p == nil {
		return out, nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("read the App's permissions: %w", err)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("read the App's permissions: %w", err)
	}
	return out, nil
}

// InstallationsDetail returns the App's installations (at most maxPages pages of 100) with their
// accounts and accepted permissions.
func (a *AppClient) InstallationsDetail(ctx context.Context, maxPages int) ([]ghapi.Installation, error) {
	var out []ghapi.Installation
	opts := &github.ListOptions{PerPage: 100}
	for n := 1; ; n++ {
		page, resp, err := a.gh.Apps.ListInstallations(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list the App's installations: %w", classify(err))
		}
		for _, in := range page {
			perms, err := permissionMap(in.GetPermissions())
			if err != nil {
				return nil, err
			}
			out = append(out, ghapi.Installation{ID: in.GetID(), Account: in.GetAccount().GetLogin(), Suspended: in.SuspendedAt != nil,
				AllRepositories: in.GetRepositorySelection() == "all", Permissions: perms})
		}
		if resp.NextPage == 0 || n >= maxPages {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
}

// RunnerReleases returns the newest releases of the runner (actions/runner, one page of 30,
// newest first), read anonymously from apiURL.
func RunnerReleases(ctx context.Context, apiURL string, hc *http.Client) ([]ghapi.Release, error) {
	c, err := newClient(apiURL, github.NewClient(hc), ghapi.Scope{})
	if err != nil {
		return nil, err
	}
	page, _, err := c.gh.Repositories.ListReleases(ctx, "actions", "runner", &github.ListOptions{PerPage: 30})
	if err != nil {
		return nil, fmt.Errorf("list the runner's releases (actions/runner): %w", classify(err))
	}
	var out []ghapi.Release
	for _, r := range page {
		if r.GetDraft() || r.GetPrerelease() {
			continue
		}
		out = append(out, ghapi.Release{Version: strings.TrimPrefix(r.GetTagName(), "v"), PublishedAt: r.GetPublishedAt().Time})
	}
	return out, nil
}

// HookConfig returns where GitHub delivers the App's webhook (GET /app/hook/config).
func (a *AppClient) HookConfig(ctx context.Context) (ghapi.HookConfig, error) {
	c, _, err := a.gh.Apps.GetHookConfig(ctx)
	if err != nil {
		return ghapi.HookConfig{}, fmt.Errorf("read the App's webhook configuration: %w", classify(err))
	}
	return ghapi.HookConfig{URL: c.GetURL(), ContentType: c.GetContentType(), InsecureSSL: c.GetInsecureSSL() == "1"}, nil
}
