package ghclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/go-github/v66/github"

	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
)

// The App's and its installations' reads that look for work GitHub never delivered: the App's
// webhook deliveries (the App's JWT), and an installation's repositories and queued jobs (an
// installation token).

// AppClient is a GitHub client that acts as the App itself (its JWT, through hc).
type AppClient struct {
	gh *github.Client
}

// NewApp returns a client for apiURL whose requests hc authenticates as the App.
func NewApp(apiURL string, hc *http.Client) (*AppClient, error) {
	c, err := newClient(apiURL, github.NewClient(hc), ghapi.Scope{})
	if err != nil {
		return nil, err
	}
	return &AppClient{gh: c.gh}, nil
}

// HookDeliveries returns one page (at most 100, newest first) of the App webhook's deliveries,
// from cursor ("" for the newest), and the cursor of the next page ("" after the last).
func (a *AppClient) HookDeliveries(ctx context.Context, cursor string) ([]ghapi.Delivery, string, error) {
	page, resp, err := a.gh.Apps.ListHookDeliveries(ctx, &github.ListCursorOptions{PerPage: 100, Cursor: cursor})
	if err != nil {
		return nil, "", fmt.Errorf("list the App's webhook deliveries: %w", classify(err))
	}
	out := make([]ghapi.Delivery, 0, len(page))
	for _, d := range page {
		out = append(out, ghapi.Delivery{ID: d.GetID(), GUID: d.GetGUID(), At: d.GetDeliveredAt().Time, Redelivery: d.GetRedelivery(),
			StatusCode: d.GetStatusCode(), Event: d.GetEvent(), Action: d.GetAction(), Installation: d.GetInstallationID(),
			RepositoryID: d.GetRepositoryID()})
	}
	return out, resp.Cursor, nil
}

// Redeliver asks GitHub to deliver delivery id's event again (POST …/deliveries/{id}/attempts).
func (a *AppClient) Redeliver(ctx context.Context, id int64) error {
	_, _, err := a.gh.Apps.RedeliverHookDelivery(ctx, id)
	var accepted *github.AcceptedError // 202: GitHub queued the attempt
	if err != nil && !errors.As(err, &accepted) {
		return fmt.Errorf("redeliver webhook delivery %d: %w", id, classify(err))
	}
	return nil
}

// Installations returns the ids of the App's active installations (at most maxPages pages of
// 100) and the requests it took.
func (a *AppClient) Installations(ctx context.Context, maxPages int) ([]int64, int, error) {
	var out []int64
	opts := &github.ListOptions{PerPage: 100}
	for n := 1; ; n++ {
		page, resp, err := a.gh.Apps.ListInstallations(ctx, opts)
		if err != nil {
			return nil, n, fmt.Errorf("list the App's installations: %w", classify(err))
		}
		for _, in := range page {
			if in.SuspendedAt == nil {
				out = append(out, in.GetID())
			}
		}
		if resp.NextPage == 0 || n >= maxPages {
			return out, n, nil
		}
		opts.Page = resp.NextPage
	}
}

// Repositories returns the repositories the client's installation may act on (at most maxPages
// pages of 100), and the requests it took.
func (c *Client) Repositories(ctx context.Context, maxPages int) ([]ghapi.Repository, int, error) {
	var out []ghapi.Repository
	opts := &github.ListOptions{PerPage: 100}
	for n := 1; ; n++ {
		page, resp, err := c.gh.Apps.ListRepos(ctx, opts)
		if err != nil {
			return nil, n, fmt.Errorf("list the installation's repositories: %w", classify(err))
		}
		for _, r := range page.Repositories {
			out = append(out, ghapi.Repository{ID: r.GetID(), FullName: r.GetFullName(), Archived: r.GetArchived()})
		}
		if resp.NextPage == 0 || n >= maxPages {
			return out, n, nil
		}
		opts.Page = resp.NextPage
	}
}

// ActiveRuns returns repository owner/name's workflow runs of the last day that have not
// completed (a run some of whose jobs run may have others queued; GitHub cancels a job queued for
// a day), and the requests it took: one, the newest 100 runs, which covers every run a repository
// has going unless it starts more than 100 a day and keeps an old one going.
func (c *Client) ActiveRuns(ctx context.Context, owner, name string) ([]ghapi.WorkflowRun, int, error) {
	since := time.Now().Add(-24 * time.Hour).UTC().Format(time.RFC3339)
	runs, _, err := c.gh.Actions.ListRepositoryWorkflowRuns(ctx, owner, name, &github.ListWorkflowRunsOptions{
		Created: ">=" + since, ListOptions: github.ListOptions{PerPage: 100}})
	if err != nil {
		return nil, 1, fmt.Errorf("list the runs of %s/%s: %w", owner, name, classify(err))
	}
	var out []ghapi.WorkflowRun
	for _, r := range runs.WorkflowRuns {
		if r.GetStatus() != "completed" {
			out = append(out, ghapi.WorkflowRun{ID: r.GetID(), Status: r.GetStatus(), CreatedAt: r.GetCreatedAt().Time})
		}
	}
	return out, 1, nil
}

// RunJobs returns the jobs of the latest attempt of run runID of repository owner/name (one page
// of 100: a run's jobs beyond those are swept once the first have run).
func (c *Client) RunJobs(ctx context.Context, owner, name string, runID int64) ([]ghapi.WorkflowJob, error) {
	page, _, err := c.gh.Actions.ListWorkflowJobs(ctx, owner, name, runID, &github.ListWorkflowJobsOptions{
		Filter: "latest", ListOptions: github.ListOptions{PerPage: 100}})
	if err != nil {
		return nil, fmt.Errorf("list the jobs of run %d of %s/%s: %w", runID, owner, name, classify(err))
	}
	out := make([]ghapi.WorkflowJob, 0, len(page.Jobs))
	for _, j := range page.Jobs {
		out = append(out, ghapi.WorkflowJob{ID: j.GetID(), RunID: j.GetRunID(), RunAttempt: int(j.GetRunAttempt()), Status: j.GetStatus(),
			Labels: j.Labels, CreatedAt: j.GetCreatedAt().Time})
	}
	return out, nil
}
