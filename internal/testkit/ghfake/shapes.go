package ghfake

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// GitHub's objects as its REST API and its webhook payloads show them, with every field GitHub's
// own descriptions require (contract_test.go holds the stand-in to @octokit/openapi and
// @octokit/openapi-webhooks): users, organisations, repositories, workflow runs and jobs, and
// installations. Fields the stand-in does not model carry GitHub's defaults.

// epoch is when the stand-in's accounts and repositories say they were made.
var epoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// account is user or organisation login as a simple-user (owner, sender, an installation's
// account): type Organization for the organisations the stand-in knows. The caller holds s.mu.
func (s *Server) account(login string) map[string]any {
	kind := "User"
	if s.isOrg(login) {
		kind = "Organization"
	}
	return user(s.URL(), login, stableID(strings.ToLower(login)), kind)
}

// user is a simple-user of the stand-in at api.
func user(api, login string, id int64, kind string) map[string]any {
	u := api + "/users/" + login
	return map[string]any{
		"login": login, "id": id, "node_id": fmt.Sprintf("U_fake%d", id), "type": kind, "site_admin": false,
		"avatar_url": fmt.Sprintf("%s/avatars/u/%d", api, id), "gravatar_id": "", "html_url": api + "/" + login, "url": u,
		"followers_url": u + "/followers", "following_url": u + "/following{/other_user}", "gists_url": u + "/gists{/gist_id}",
		"starred_url": u + "/starred{/owner}{/repo}", "subscriptions_url": u + "/subscriptions", "organizations_url": u + "/orgs",
		"repos_url": u + "/repos", "events_url": u + "/events{/privacy}", "received_events_url": u + "/received_events",
	}
}

// organisation is login as a webhook payload's organization (organization-simple-webhooks).
func (s *Server) organisation(login string) map[string]any {
	api, id := s.URL(), stableID(strings.ToLower(login))
	u := api + "/orgs/" + login
	return map[string]any{
		"login": login, "id": id, "node_id": fmt.Sprintf("O_fake%d", id), "url": u, "repos_url": u + "/repos",
		"events_url": u + "/events", "hooks_url": u + "/hooks", "issues_url": u + "/issues", "members_url": u + "/members{/member}",
		"public_members_url": u + "/public_members{/member}", "avatar_url": fmt.Sprintf("%s/avatars/u/%d", api, id), "description": nil,
	}
}

// repository is repository repo (owner/name) as GitHub's full repository object shows it, which
// is also a minimal-repository and a payload's repository. The caller holds s.mu.
func (s *Server) repository(repo string) map[string]any {
	api, id := s.URL(), s.RepoID(repo)
	owner, name, _ := strings.Cut(repo, "/")
	u, html := api+"/repos/"+repo, api+"/"+repo
	r := map[string]any{
		"id": id, "node_id": fmt.Sprintf("R_fake%d", id), "name": name, "full_name": repo, "owner": s.account(owner),
		"private": true, "visibility": "private", "html_url": html, "description": nil, "fork": false, "url": u,
		"homepage": nil, "language": nil, "mirror_url": nil, "license": nil, "default_branch": "main",
		"archived": false, "disabled": false, "has_issues": true, "has_projects": true, "has_wiki": true, "has_pages": false,
		"has_downloads": true, "forks": 0, "forks_count": 0, "open_issues": 0, "open_issues_count": 0, "size": 0,
		"stargazers_count": 0, "watchers": 0, "watchers_count": 0,
		"created_at": stamp(epoch), "updated_at": stamp(epoch), "pushed_at": stamp(epoch),
		"clone_url": html + ".git", "git_url": strings.Replace(html, "http", "git", 1) + ".git", "ssh_url": "git@fake:" + repo + ".git",
		"svn_url": html,
	}
	for _, p := range []string{"contributors", "deployments", "downloads", "events", "forks", "hooks", "languages", "merges",
		"stargazers", "subscribers", "subscription", "tags", "teams"} {
		r[p+"_url"] = u + "/" + p
	}
	for k, p := range map[string]string{
		"archive": "{archive_format}{/ref}", "assignees": "assignees{/user}", "blobs": "git/blobs{/sha}", "branches": "branches{/branch}",
		"collaborators": "collaborators{/collaborator}", "comments": "comments{/number}", "commits": "commits{/sha}",
		"compare": "compare/{base}...{head}", "contents": "contents/{+path}", "git_commits": "git/commits{/sha}",
		"git_refs": "git/refs{/sha}", "git_tags": "git/tags{/sha}", "issue_comment": "issues/comments{/number}",
		"issue_events": "issues/events{/number}", "issues": "issues{/number}", "keys": "keys{/key_id}", "labels": "labels{/name}",
		"milestones": "milestones{/number}", "notifications": "notifications{?since,all,participating}", "pulls": "pulls{/number}",
		"releases": "releases{/id}", "statuses": "statuses/{sha}", "trees": "git/trees{/sha}",
	} {
		r[k+"_url"] = u + "/" + p
	}
	return r
}

// job is job j as GitHub shows it, in a payload's workflow_job and in the REST API's run jobs,
// as of status: no runner while queued or waiting, a conclusion and an end once completed. The
// caller holds s.mu.
func (s *Server) job(j *Job, status string) map[string]any {
	api, repo := s.URL(), string(j.Repo)
	run := runID(j)
	started := j.CreatedAt // GitHub's queued jobs carry their creation time as started_at
	if status != "queued" && status != "waiting" && !j.StartedAt.IsZero() {
		started = j.StartedAt
	}
	wj := map[string]any{
		"id": j.ID, "run_id": run, "run_attempt": 1, "node_id": fmt.Sprintf("CR_kwDOfake%d", j.ID),
		"run_url":       fmt.Sprintf("%s/repos/%s/actions/runs/%d", api, repo, run),
		"url":           fmt.Sprintf("%s/repos/%s/actions/jobs/%d", api, repo, j.ID),
		"html_url":      fmt.Sprintf("%s/%s/actions/runs/%d/job/%d", api, repo, run, j.ID),
		"check_run_url": fmt.Sprintf("%s/repos/%s/check-runs/%d", api, repo, j.ID),
		"head_sha":      headSHA(repo, j.RunID), "head_branch": "main",
		"status": status, "conclusion": nil,
		"created_at": stamp(j.CreatedAt), "started_at": stamp(started), "completed_at": nil,
		"name": fmt.Sprintf("job-%d", j.ID), "steps": []any{}, "labels": append([]string{}, j.Labels...),
		"runner_id": nil, "runner_name": nil, "runner_group_id": nil, "runner_group_name": nil,
		"workflow_name": workflowName,
	}
	if (status == "in_progress" || status == "completed") && j.RunnerID != 0 {
		wj["runner_id"], wj["runner_name"] = j.RunnerID, j.RunnerName
		wj["runner_group_id"], wj["runner_group_name"] = s.groupIDs[j.RunnerGroup], j.RunnerGroup
	}
	if status == "completed" {
		if j.Conclusion != "" {
			wj["conclusion"] = j.Conclusion
		}
		done := j.CompletedAt
		if done.IsZero() {
			done = s.now()
		}
		wj["completed_at"] = stamp(done)
	}
	return wj
}

// runID is the workflow run job j belongs to, as a number (0 when its run id is not one).
func runID(j *Job) int64 {
	id, _ := strconv.ParseInt(j.RunID, 10, 64)
	return id
}

// workflowName is the one workflow every run of the stand-in's runs.
const workflowName = "ci"

// workflowRun is run x of repository repo as the REST API's workflow runs show it. The caller
// holds s.mu.
func (s *Server) workflowRun(repo string, x *run) map[string]any {
	api := s.URL()
	u := fmt.Sprintf("%s/repos/%s/actions/runs/%d", api, repo, x.id)
	workflow := stableID(strings.ToLower(repo) + "/" + workflowName)
	sha := headSHA(repo, fmt.Sprint(x.id))
	updated, conclusion := x.created, any(nil)
	for _, j := range x.jobs {
		for _, t := range []time.Time{j.StartedAt, j.CompletedAt} {
			if t.After(updated) {
				updated = t
			}
		}
		if x.status == "completed" && (conclusion == nil || j.Conclusion != "success") {
			conclusion = j.Conclusion
		}
	}
	author := map[string]any{"name": "Mona Octocat", "email": "mona@example.com"}
	return map[string]any{
		"id": x.id, "node_id": fmt.Sprintf("WFR_fake%d", x.id), "name": workflowName, "display_title": workflowName,
		"run_number": x.id, "run_attempt": 1, "event": "push", "status": x.status, "conclusion": conclusion,
		"head_branch": "main", "head_sha": sha, "path": ".github/workflows/" + workflowName + ".yml", "workflow_id": workflow,
		"created_at": stamp(x.created), "updated_at": stamp(updated), "run_started_at": stamp(x.created),
		"url": u, "html_url": fmt.Sprintf("%s/%s/actions/runs/%d", api, repo, x.id), "jobs_url": u + "/jobs", "logs_url": u + "/logs",
		"check_suite_url": fmt.Sprintf("%s/repos/%s/check-suites/%d", api, repo, x.id), "cancel_url": u + "/cancel",
		"rerun_url": u + "/rerun", "artifacts_url": u + "/artifacts",
		"workflow_url": fmt.Sprintf("%s/repos/%s/actions/workflows/%d", api, repo, workflow),
		"head_commit": map[string]any{"id": sha, "tree_id": sha, "message": "the stand-in's commit", "timestamp": stamp(x.created),
			"author": author, "committer": author},
		"repository": s.repository(repo), "head_repository": s.repository(repo), "pull_requests": []any{},
	}
}

// installationObject is installation in as the App's installations show it. The caller holds
// s.mu.
func (s *Server) installationObject(in *installation) map[string]any {
	api, account := s.URL(), s.account(in.owner)
	// The description of GET /app/installations has the account be a user and an enterprise at
	// once (allOf): it carries an enterprise's name, slug and times too.
	account["name"], account["slug"], account["created_at"], account["updated_at"] = in.owner, strings.ToLower(in.owner), stamp(epoch), stamp(epoch)
	selection, html := "all", fmt.Sprintf("%s/settings/installations/%d", api, in.id)
	if in.repos != nil {
		selection = "selected"
	}
	if account["type"] == "Organization" {
		html = fmt.Sprintf("%s/organizations/%s/settings/installations/%d", api, in.owner, in.id)
	}
	appID := int64(0)
	if s.app != nil {
		appID = s.app.id
	}
	return map[string]any{
		"id": in.id, "app_id": appID, "app_slug": "hangar", "account": account, "target_id": account["id"], "target_type": account["type"],
		"repository_selection": selection, "single_file_name": nil, "permissions": in.permissions(), "events": []string{"workflow_job"},
		"access_tokens_url": fmt.Sprintf("%s/app/installations/%d/access_tokens", api, in.id),
		"repositories_url":  api + "/installation/repositories", "html_url": html,
		"created_at": stamp(epoch), "updated_at": stamp(epoch), "suspended_at": nil, "suspended_by": nil,
	}
}
