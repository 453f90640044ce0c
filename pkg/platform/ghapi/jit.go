package ghapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/go-github/v66/github"
)

// RepositoryGroupID is the runner group id a repository's just-in-time runners are made in:
// repositories have only the default group.
const RepositoryGroupID = 1

// JITRequest asks for one just-in-time runner.
type JITRequest struct {
	// Name is the runner's name (at most 64 characters; unique in the scope).
	Name string
	// Labels are exactly the labels the runner carries: GitHub adds none to a just-in-time runner.
	Labels []string
	// GroupID is the organisation runner group's id (RunnerGroupID); for a repository,
	// RepositoryGroupID.
	GroupID int64
	// WorkFolder is the runner's work directory, relative to its own directory ("" for _work).
	WorkFolder string
}

// JIT is a just-in-time runner: registered, offline until a runner starts with Config, and
// removed by GitHub after its one job.
type JIT struct {
	RunnerID int64
	// Config is the encoded configuration `run.sh --jitconfig` takes: a credential of the runner,
	// to be handed to one instance only.
	Config string
}

// ErrNoConfig is returned when GitHub's answer holds no configuration.
var ErrNoConfig = errors.New("GitHub returned no just-in-time configuration")

// GenerateJITConfig registers a just-in-time runner in the client's scope and returns its
// configuration.
func (c *Client) GenerateJITConfig(ctx context.Context, r JITRequest) (JIT, error) {
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
		return JIT{}, fmt.Errorf("make just-in-time runner %s in %s: %w", r.Name, c.scope, err)
	}
	if out.GetEncodedJITConfig() == "" || out.GetRunner().GetID() == 0 {
		return JIT{}, fmt.Errorf("make just-in-time runner %s in %s: %w", r.Name, c.scope, ErrNoConfig)
	}
	return JIT{RunnerID: out.GetRunner().GetID(), Config: out.GetEncodedJITConfig()}, nil
}

// ErrNoGroup is returned (wrapped) by RunnerGroupID for a group the organisation does not have.
var ErrNoGroup = errors.New("no such runner group")

// RunnerGroupID returns the id of the organisation's runner group named name.
func (c *Client) RunnerGroupID(ctx context.Context, name string) (int64, error) {
	if c.scope.Repo != "" {
		return RepositoryGroupID, nil
	}
	opts := &github.ListOrgRunnerGroupOptions{ListOptions: github.ListOptions{PerPage: 100}}
	for {
		page, resp, err := c.gh.Actions.ListOrganizationRunnerGroups(ctx, c.scope.Owner, opts)
		if err != nil {
			return 0, fmt.Errorf("list the runner groups of %s: %w", c.scope.Owner, err)
		}
		for _, g := range page.RunnerGroups {
			if g.GetName() == name {
				return g.GetID(), nil
			}
		}
		if resp.NextPage == 0 {
			return 0, fmt.Errorf("runner group %q of %s: %w (create it, limited to the pool's repositories)", name, c.scope.Owner, ErrNoGroup)
		}
		opts.Page = resp.NextPage
	}
}

// RunnerByName returns the scope's runner named name, or an error that IsNotFound reports.
func (c *Client) RunnerByName(ctx context.Context, name string) (Runner, error) {
	all, err := c.Runners(ctx)
	if err != nil {
		return Runner{}, err
	}
	for _, r := range all {
		if r.Name == name {
			return r, nil
		}
	}
	return Runner{}, &github.ErrorResponse{Response: notFound, Message: "runner " + name + " not found in " + c.scope.String()}
}
