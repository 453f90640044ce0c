package ghfake_test

import (
	"cmp"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
	"github.com/hangar-ci/hangar/internal/testkit/ghspec"
)

// endpointCase is one answer of the stand-in to hold to GitHub's REST description: a request,
// and the status the stand-in must answer it with.
type endpointCase struct {
	name   string
	method string
	// path may name the fixture's ids: {runner}, {doomed}, {busy}, {org-runner}, {org-doomed},
	// {group}, {repo-id}, {installation}, {delivery}, {run}.
	path string
	// auth is the credential sent: admin (an admin token), app (the App's JWT), installation:<owner>
	// (a token of the App's installation on owner), bad (one the stand-in never issued), or none.
	auth   string
	body   string // JSON, with the same ids as path; none when empty
	status int
}

// endpointCases are the REST calls Hangar's shipped code makes (package ghclient, and the
// installation tokens ghinstallation asks for in package ghapp), each with its success and the
// errors Hangar handles. They run in order against one fixture: a case that changes the
// stand-in's state (a deletion, labels) comes before the cases that rely on the change. Add a
// row here for every new call.
var endpointCases = []endpointCase{
	// Runner registration tokens (ghclient.RegistrationToken).
	{"repository registration token", "POST", "/repos/octo/app/actions/runners/registration-token", "admin", "", 201},
	{"organisation registration token", "POST", "/orgs/octo/actions/runners/registration-token", "installation:octo", "", 201},
	{"registration token, bad credentials", "POST", "/repos/octo/app/actions/runners/registration-token", "bad", "", 401},

	// Self-hosted runners (ghclient.Runners, RunnerByName, DeleteRunner).
	{"list repository runners", "GET", "/repos/octo/app/actions/runners?per_page=100", "admin", "", 200},
	{"list organisation runners", "GET", "/orgs/octo/actions/runners?per_page=100", "installation:octo", "", 200},
	{"list runners by name", "GET", "/repos/octo/app/actions/runners?name=runner-1", "admin", "", 200},
	{"list runners, permission withheld", "GET", "/repos/mona/tool/actions/runners?per_page=100", "installation:mona", "", 403},
	{"get runner", "GET", "/repos/octo/app/actions/runners/{runner}", "admin", "", 200},
	{"get organisation runner", "GET", "/orgs/octo/actions/runners/{org-runner}", "admin", "", 200},
	{"get runner, none", "GET", "/repos/octo/app/actions/runners/999999", "admin", "", 404},
	{"delete runner", "DELETE", "/repos/octo/app/actions/runners/{doomed}", "admin", "", 204},
	{"delete runner, gone", "DELETE", "/repos/octo/app/actions/runners/{doomed}", "admin", "", 404},
	{"delete runner, running a job", "DELETE", "/repos/octo/app/actions/runners/{busy}", "admin", "", 422},
	{"delete organisation runner", "DELETE", "/orgs/octo/actions/runners/{org-doomed}", "installation:octo", "", 204},

	// Runner labels.
	{"list labels", "GET", "/repos/octo/app/actions/runners/{runner}/labels", "admin", "", 200},
	{"add labels", "POST", "/repos/octo/app/actions/runners/{runner}/labels", "admin", `{"labels":["extra"]}`, 200},
	{"add labels, none", "POST", "/repos/octo/app/actions/runners/{runner}/labels", "admin", `{"labels":[]}`, 422},
	{"remove a label", "DELETE", "/repos/octo/app/actions/runners/{runner}/labels/extra", "admin", "", 200},
	{"remove a label, not there", "DELETE", "/repos/octo/app/actions/runners/{runner}/labels/extra", "admin", "", 404},
	{"set labels", "PUT", "/repos/octo/app/actions/runners/{runner}/labels", "admin", `{"labels":["a","b"]}`, 200},
	{"remove all labels", "DELETE", "/repos/octo/app/actions/runners/{runner}/labels", "admin", "", 200},
	{"list labels, no runner", "GET", "/repos/octo/app/actions/runners/999999/labels", "admin", "", 404},

	// Just-in-time runners (ghclient.GenerateJITConfig).
	{"repository jitconfig", "POST", "/repos/octo/app/actions/runners/generate-jitconfig", "installation:octo",
		`{"name":"jit-1","runner_group_id":1,"labels":["self-hosted","linux"],"work_folder":"_work"}`, 201},
	{"organisation jitconfig", "POST", "/orgs/octo/actions/runners/generate-jitconfig", "installation:octo",
		`{"name":"jit-2","runner_group_id":{group},"labels":["self-hosted","linux"]}`, 201},
	{"jitconfig, name taken", "POST", "/repos/octo/app/actions/runners/generate-jitconfig", "admin",
		`{"name":"jit-1","runner_group_id":1,"labels":["linux"]}`, 409},
	{"jitconfig, no such group", "POST", "/orgs/octo/actions/runners/generate-jitconfig", "admin",
		`{"name":"jit-3","runner_group_id":999,"labels":["linux"]}`, 404},
	{"jitconfig, no labels", "POST", "/repos/octo/app/actions/runners/generate-jitconfig", "admin",
		`{"name":"jit-4","runner_group_id":1,"labels":[]}`, 422},
	{"jitconfig, refused", "POST", "/repos/octo/app/actions/runners/generate-jitconfig", "admin",
		`{"name":"refused-1","runner_group_id":1,"labels":["linux"]}`, 503},

	// Runner groups (ghclient.RepositoryGroup).
	{"list runner groups", "GET", "/orgs/octo/actions/runner-groups?per_page=100", "installation:octo", "", 200},
	{"create runner group", "POST", "/orgs/octo/actions/runner-groups", "installation:octo",
		`{"name":"hangar-app","visibility":"selected","selected_repository_ids":[{repo-id}],"allows_public_repositories":false}`, 201},
	{"create runner group, name taken", "POST", "/orgs/octo/actions/runner-groups", "installation:octo",
		`{"name":"hangar-app","visibility":"selected","selected_repository_ids":[{repo-id}],"allows_public_repositories":false}`, 409},
	{"list a group's repositories", "GET", "/orgs/octo/actions/runner-groups/{group}/repositories?per_page=2", "installation:octo", "", 200},
	{"list a group's repositories, no such group", "GET", "/orgs/octo/actions/runner-groups/999/repositories?per_page=2", "installation:octo", "", 404},

	// The App (ghinstallation's installation tokens; ghclient.AppClient).
	{"installation token", "POST", "/app/installations/{installation}/access_tokens", "app", "", 201},
	{"installation token, no such installation", "POST", "/app/installations/999/access_tokens", "app", "", 404},
	{"installation token, bad JWT", "POST", "/app/installations/{installation}/access_tokens", "bad", "", 401},
	{"list installations", "GET", "/app/installations?per_page=100", "app", "", 200},
	{"list webhook deliveries", "GET", "/app/hook/deliveries?per_page=100", "app", "", 200},
	{"list webhook deliveries, bad cursor", "GET", "/app/hook/deliveries?per_page=100&cursor=junk", "app", "", 422},
	{"redeliver", "POST", "/app/hook/deliveries/{delivery}/attempts", "app", "", 202},
	{"redeliver, no such delivery", "POST", "/app/hook/deliveries/999999/attempts", "app", "", 404},

	// An installation's repositories and work (ghclient.Repositories, ActiveRuns, RunJobs).
	{"installation repositories", "GET", "/installation/repositories?per_page=100", "installation:octo", "", 200},
	{"installation repositories, bad credentials", "GET", "/installation/repositories?per_page=100", "bad", "", 401},
	{"list workflow runs", "GET", "/repos/octo/app/actions/runs?created=%3E%3D2000-01-01T00%3A00%3A00Z&per_page=100", "installation:octo", "", 200},
	{"list workflow runs, bad created", "GET", "/repos/octo/app/actions/runs?created=junk", "installation:octo", "", 422},
	{"list a run's jobs", "GET", "/repos/octo/app/actions/runs/{run}/jobs?filter=latest&per_page=100", "installation:octo", "", 200},
	{"list a run's jobs, no such run", "GET", "/repos/octo/app/actions/runs/999/jobs?filter=latest&per_page=100", "installation:octo", "", 404},
}

// hangarOperations are the operations Hangar's shipped code calls (by operationId): each must be
// answered successfully by some case.
var hangarOperations = []string{
	"actions/create-registration-token-for-repo", "actions/create-registration-token-for-org",
	"actions/list-self-hosted-runners-for-repo", "actions/list-self-hosted-runners-for-org",
	"actions/delete-self-hosted-runner-from-repo", "actions/delete-self-hosted-runner-from-org",
	"actions/generate-runner-jitconfig-for-repo", "actions/generate-runner-jitconfig-for-org",
	"actions/list-self-hosted-runner-groups-for-org", "actions/create-self-hosted-runner-group-for-org",
	"actions/list-repo-access-to-self-hosted-runner-group-in-org",
	"apps/create-installation-access-token", "apps/list-installations", "apps/list-webhook-deliveries",
	"apps/redeliver-webhook-delivery", "apps/list-repos-accessible-to-installation",
	"actions/list-workflow-runs-for-repo", "actions/list-jobs-for-workflow-run",
}

// TestRESTContract: every answer the stand-in gives to Hangar's REST calls, successes and the
// errors Hangar handles, at the API's root and under /api/v3 (an enterprise server's), is what
// GitHub's own description says that operation answers with that status.
func TestRESTContract(t *testing.T) {
	t.Parallel()
	rest := ghspec.LoadREST(t)
	for _, prefix := range []string{"", "/api/v3"} {
		t.Run("at "+cmp.Or(prefix, "/"), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			answered := map[string]bool{}
			for _, tc := range endpointCases {
				path := prefix + f.expand(tc.path)
				status, body := f.do(t, tc.method, path, tc.auth, f.expand(tc.body))
				require.Equal(t, tc.status, status, "%s: %s %s answered %s", tc.name, tc.method, path, body)
				assert.NoError(t, rest.Validate(tc.method, path, status, body), "%s: %s %s", tc.name, tc.method, path)
				if op, err := rest.Operation(tc.method, path); err == nil && status < 300 {
					answered[op.ID] = true
				}
			}
			for _, id := range hangarOperations {
				require.True(t, answered[id], "no case answers %s successfully", id)
			}
		})
	}
}

// fixture is a stand-in with what the cases name: the App installed on the organisation octo
// (repository octo/app) and on the user mona (without the administration permission), runners,
// a runner group, a workflow run of three jobs (done, running, queued) and their deliveries.
type fixture struct {
	s    *ghfake.Server
	jwt  string
	ids  map[string]string
	toks map[string]string // installation tokens, by owner
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	s := ghfake.New("admin-token")
	t.Cleanup(s.Close)
	s.SetRunnerLostAfter(time.Hour) // the running job stays running however long the test takes
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(hook.Close)
	s.SetWebhook(hook.URL, "hook-secret")
	key, err := jwt.ParseRSAPrivateKeyFromPEM(s.EnableApp(appID))
	require.NoError(t, err)
	f := &fixture{s: s, jwt: signJWT(t, key, appID, time.Now(), time.Now().Add(9*time.Minute)), ids: map[string]string{}, toks: map[string]string{}}
	s.SetOrg("octo")
	octo, mona := s.Install("octo"), s.Install("mona")
	s.WithholdPermission("mona", "administration")
	for owner, id := range map[string]int64{"octo": octo, "mona": mona} {
		status, body := f.do(t, "POST", "/app/installations/"+strconv.FormatInt(id, 10)+"/access_tokens", "app", "")
		require.Equal(t, http.StatusCreated, status, "%s", body)
		var tok struct{ Token string }
		require.NoError(t, json.Unmarshal(body, &tok))
		f.toks[owner] = tok.Token
	}
	s.SetGroup("team", "octo/app")
	s.RefuseRunners("refused-")
	id := func(n int64) string { return strconv.FormatInt(n, 10) }
	f.ids["{installation}"] = id(octo)
	f.ids["{repo-id}"] = id(s.RepoID("octo/app"))
	f.ids["{group}"] = "2" // SetGroup's first group
	f.ids["{runner}"] = id(s.AddRunner("octo/app", "runner-1", "self-hosted", "linux"))
	f.ids["{doomed}"] = id(s.AddRunner("octo/app", "doomed", "self-hosted"))
	busy := s.AddRunner("octo/app", "busy", "self-hosted")
	s.SetBusy(busy, true)
	f.ids["{busy}"] = id(busy)
	f.ids["{org-runner}"] = id(s.AddRunner("octo", "org-runner", "self-hosted"))
	f.ids["{org-doomed}"] = id(s.AddRunner("octo", "org-doomed", "self-hosted"))

	// A run of three jobs: one done, one running, one queued.
	const run = 4242
	f.ids["{run}"] = id(run)
	done := s.QueueWorkflowJob("octo/app", run, []string{"self-hosted", "done"}, "true")
	f.runJob(t, "octo/app", "worker-1", done, true)
	running := s.QueueWorkflowJob("octo/app", run, []string{"self-hosted", "running"}, "true")
	f.runJob(t, "octo/app", "worker-2", running, false)
	s.QueueWorkflowJob("octo/app", run, []string{"self-hosted", "never"}, "true")
	require.NoError(t, s.WaitDeliveries(testCtx(t), 6))
	f.ids["{delivery}"] = id(s.Deliveries()[0].Num)
	return f
}

// runJob makes a just-in-time runner in repo with the job's labels and has it take job id, and
// finish it when finish is set, through the stand-in runner's protocol.
func (f *fixture) runJob(t *testing.T, repo, name string, id int64, finish bool) {
	t.Helper()
	j, ok := f.s.Job(id)
	require.True(t, ok)
	labels, _ := json.Marshal(j.Labels)
	status, body := f.do(t, "POST", "/repos/"+repo+"/actions/runners/generate-jitconfig", "admin",
		`{"name":"`+name+`","runner_group_id":1,"labels":`+string(labels)+`}`)
	require.Equal(t, http.StatusCreated, status, "%s", body)
	var out struct {
		Config string `json:"encoded_jit_config"`
	}
	require.NoError(t, json.Unmarshal(body, &out))
	cfg, err := ghfake.DecodeJITConfig(out.Config)
	require.NoError(t, err)
	runner := "/_fake/runners/" + strconv.FormatInt(cfg.ID, 10)
	auth := "Runner " + cfg.Credential
	status, body = f.do(t, "POST", runner+"/status", auth, `{"status":"online"}`)
	require.Equal(t, http.StatusNoContent, status, "%s", body)
	status, body = f.do(t, "POST", runner+"/next", auth, "")
	require.Equal(t, http.StatusOK, status, "%s", body)
	var got ghfake.JobAssignment
	require.NoError(t, json.Unmarshal(body, &got))
	require.Equal(t, id, got.ID)
	if finish {
		status, body = f.do(t, "POST", runner+"/jobs/"+strconv.FormatInt(id, 10), auth, `{"conclusion":"success","output":"ok"}`)
		require.Equal(t, http.StatusNoContent, status, "%s", body)
	}
}

// expand replaces the fixture's ids in s.
func (f *fixture) expand(s string) string {
	for k, v := range f.ids {
		s = strings.ReplaceAll(s, k, v)
	}
	return s
}

// do sends a request to the stand-in and returns its status and body.
func (f *fixture) do(t *testing.T, method, path, auth, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), method, f.s.URL()+path, strings.NewReader(body))
	require.NoError(t, err)
	switch {
	case auth == "admin":
		req.Header.Set("Authorization", "Bearer admin-token")
	case auth == "app":
		req.Header.Set("Authorization", "Bearer "+f.jwt)
	case auth == "bad":
		req.Header.Set("Authorization", "Bearer not-a-credential")
	case strings.HasPrefix(auth, "installation:"):
		req.Header.Set("Authorization", "token "+f.toks[strings.TrimPrefix(auth, "installation:")])
	case auth != "none" && auth != "":
		req.Header.Set("Authorization", auth)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.s.HTTPClient().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// TestWebhookContract: every workflow_job delivery the stand-in sends (queued, waiting,
// in_progress, completed) is what GitHub's webhooks description says that action's payload is,
// for repositories of users and of organisations, with and without the App installed.
func TestWebhookContract(t *testing.T) {
	t.Parallel()
	hooks := ghspec.LoadWebhooks(t)
	f := newFixture(t)
	s := f.s
	s.SetOrg("acme") // an organisation without the App; solo is a user without it
	type owner struct {
		repo                       string
		organisation, installation bool
	}
	owners := []owner{{"octo/app", true, true}, {"mona/tool", false, true}, {"acme/lib", true, false}, {"solo/dots", false, false}}
	jobs := map[int64]owner{}
	for i, o := range owners {
		job := s.QueueWorkflowJob(o.repo, int64(5000+i), []string{"self-hosted", "contract"}, "true")
		jobs[job] = o
		_, err := s.SendJobEvent(job, "waiting")
		require.NoError(t, err)
		f.runJob(t, o.repo, "contract-"+strconv.Itoa(i), job, true)
	}
	// Each job is delivered queued, waiting, in_progress and completed.
	require.NoError(t, s.WaitDeliveries(testCtx(t), 6+4*len(owners)))
	seen := map[owner]map[string]bool{}
	for _, d := range s.Deliveries() {
		o, ok := jobs[d.JobID]
		if !ok {
			continue // the fixture's own jobs
		}
		require.Equal(t, http.StatusOK, d.Status, "delivery %s", d.ID)
		assert.NoError(t, hooks.Validate(ghspec.WorkflowJobSchema(d.Action), d.Body), "%s of %s", d.Action, o.repo)
		var p map[string]any
		require.NoError(t, json.Unmarshal(d.Body, &p))
		require.Equal(t, o.installation, p["installation"] != nil, "%s of %s: installation", d.Action, o.repo)
		require.Equal(t, o.organisation, p["organization"] != nil, "%s of %s: organization", d.Action, o.repo)
		if seen[o] == nil {
			seen[o] = map[string]bool{}
		}
		seen[o][d.Action] = true
	}
	for _, o := range owners {
		require.Equal(t, map[string]bool{"queued": true, "waiting": true, "in_progress": true, "completed": true}, seen[o], o.repo)
	}
}
