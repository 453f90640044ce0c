package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/emustack"
	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/quotafake"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/operator"
	"github.com/hangar-ci/hangar/pkg/operator/doctor"
	"github.com/hangar-ci/hangar/pkg/platform/ghapp"
)

// deployedWorld is a stack deployed into the emulators as make demo deploys it, with the world
// around it attached by its name and its label-routed jobs served, its App not yet registered.
type deployedWorld struct {
	d        *emustack.Deployment
	e        *localenv.Env
	jobs     *localenv.Jobs
	gh       *ghfake.Server
	deployed *emustack.Deployed
}

func newDeployedWorld(t *testing.T) *deployedWorld {
	t.Helper()
	testbed.Require(t)
	ctx := testbed.Context(t, 10*time.Minute)
	gh := ghfake.New(localenv.AdminToken)
	t.Cleanup(gh.Close)
	stack := testbed.Name(t, "setup")
	d, err := emustack.NewDeployment(ctx, stack, t.TempDir(), gh.URL())
	require.NoError(t, err)
	deployed, err := d.Deploy(ctx, emustack.Settings{Idle: pooldoc.DefaultTimeouts.Idle.D()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Remove()) })
	e, err := localenv.Start(ctx, localenv.Options{Stack: stack, Deployed: true, Baked: true, GitHub: gh})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	jobs, err := e.ServeJobs(ctx, localenv.JobsOptions{Unregistered: true})
	require.NoError(t, err)
	return &deployedWorld{d: d, e: e, jobs: jobs, gh: gh, deployed: deployed}
}

// TestSetupThroughTheBrowser is a first deployment as a new user makes it: the stack deployed,
// hangar setup run and clicked through in a browser (its page, GitHub's confirmation, back to
// setup), the App installed on the stack's repository from its page, and a label-routed job run
// — without a key or secret copied by hand: the stack's secrets hold what GitHub returned.
func TestSetupThroughTheBrowser(t *testing.T) {
	w := newDeployedWorld(t)
	owner := strings.Split(localenv.Repo, "/")[0]
	w.gh.AddRepos(localenv.Repo, owner+"/elsewhere")
	browser := chromium(t)
	quotas := w.accountQuotas(t)

	// Before setup, doctor says no App is registered, and how to register one.
	code, findings := w.doctor(t, quotas)
	require.Equal(t, 1, code)
	require.Contains(t, failing(findings)["app.credentials"], "holds no value yet")

	cmd, lines, stderr := startHangar(t, w.e.Environ(), "setup", "--stack", w.e.Stack, "--org", owner)
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	page := regexp.MustCompile(`^\s+(http://127\.0\.0\.1:[0-9]+/\?t=[0-9a-f]{32})$`)
	var addr string
	deadline := time.After(2 * time.Minute)
	for addr == "" {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "hangar setup ended without printing its page: %s", stderr.String())
			if m := page.FindStringSubmatch(line); m != nil {
				addr = m[1]
			}
		case <-deadline:
			t.Fatalf("hangar setup printed no page in 2 minutes: %s", stderr.String())
		}
	}

	// The setup page posts the manifest to the stand-in; its confirmation page creates the App
	// and sends the browser back to setup with the code.
	ctx, cancel := context.WithTimeout(browser, 3*time.Minute)
	defer cancel()
	type css = chromedp.CSS
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(addr), chromedp.Click(css("#register")), chromedp.WaitVisible(css("#create"))), stderr.String())
	confirm, err := chromedp.Run(ctx, chromedp.Text(css("h1")))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(css("#create")), chromedp.WaitVisible(css("#result"))), stderr.String())
	result, err := chromedp.Run(ctx, chromedp.Text(css("#result")))
	require.NoError(t, err)
	text, _ := chromedp.Run(ctx, chromedp.Text(css("p")))
	require.Equal(t, "Create GitHub App for "+owner, confirm)
	require.Equal(t, "Registered hangar-"+w.e.Stack, result, "%s\n%s", text, stderr.String())
	href, err := chromedp.Run(ctx, chromedp.AttributeValue(css("#install"), "href"))
	require.NoError(t, err)
	require.True(t, href.Exists, "the page links to the App's installation")
	install := href.Value

	apps := w.gh.CreatedApps()
	require.Len(t, apps, 1)
	app := apps[0]
	require.Equal(t, owner, app.Owner)
	require.True(t, app.OwnerIsOrg)
	require.False(t, app.Public, "the App is private: nobody else may install it")
	require.Equal(t, w.deployed.Outputs["WebhookUrl"], app.HookURL, "the App's webhook is the stack's Function URL")
	require.Equal(t, []string{"workflow_job"}, app.Events)
	require.Equal(t, map[string]string{"actions": "read", "administration": "write", "metadata": "read"}, app.Permissions)
	require.Equal(t, w.gh.URL()+"/github-apps/"+app.Slug+"/installations/new", install)

	// The stack's secrets hold what GitHub returned, and nothing was copied by hand.
	sm := secretsmanager.NewFromConfig(w.e.AWS)
	read := func(arn string) string {
		v, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
		require.NoError(t, err)
		return aws.ToString(v.SecretString)
	}
	creds, err := ghapp.ParseCredentials(read(w.deployed.Outputs["AppSecretArn"]))
	require.NoError(t, err)
	require.Equal(t, ghapp.Credentials{AppID: app.ID, PrivateKey: app.PEM}, creds)
	require.Equal(t, app.WebhookSecret, read(w.deployed.Outputs["WebhookSecretArn"]))

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("hangar setup did not end after storing the App: %s", stderr.String())
	}
	var printed []string
	for line := range lines {
		printed = append(printed, line)
	}
	require.Contains(t, strings.Join(printed, "\n"), install, "setup points the user at installing the App")

	// Registered but not installed: doctor names the repository and where to install the App.
	code, findings = w.doctor(t, quotas)
	require.Equal(t, 1, code)
	require.Contains(t, failing(findings)["app.installations"], localenv.Repo)
	require.Contains(t, fixOf(findings, "app.installations"), install)

	// Installed from its page on the stack's repository alone.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(install), chromedp.SetValue(css("#account"), owner),
		chromedp.Click(css(`input[value="`+localenv.Repo+`"]`)), chromedp.Click(css("#install")), chromedp.WaitVisible(css("#result"))))
	installed, err := chromedp.Run(ctx, chromedp.Text(css("#result")))
	require.NoError(t, err)
	require.Equal(t, "Installed", installed)

	// A label-routed job runs, through the App setup registered.
	job := w.gh.QueueJob(localenv.Repo, []string{"self-hosted", "hangar", "linux-x64"}, "echo hello from $RUNNER_NAME")
	got, err := w.gh.WaitJob(testbed.Context(t, 5*time.Minute), job)
	require.NoError(t, err)
	require.Equal(t, "success", got.Conclusion, got.Output)
	require.Contains(t, got.Output, "hello from hangar-")

	// The job shows in hangar runs as a job: GitHub's names for it, its page, and its runner ran it.
	// Its instance goes back to the pool as this reads: the job is read from the live item, then
	// from the record its return wrote (through the table's index, which lags a write a little).
	var jobRun *operator.RunSummary
	var listed string
	require.NoError(t, localenv.Eventually(ctx, time.Minute, "hangar runs shows the job, back in the pool", func(context.Context) (bool, error) {
		code, out, errOut := w.hangarCmd(t, "runs", "--since", "1d", "-o", "json")
		require.Equal(t, 0, code, errOut)
		var runs []operator.RunSummary
		require.NoError(t, json.Unmarshal([]byte(out), &runs))
		listed, jobRun = out, nil
		for i := range runs {
			if runs[i].Job != nil && runs[i].Job.ID == job {
				jobRun = &runs[i]
			}
		}
		return jobRun != nil && jobRun.Outcome == "released", nil
	}), "%s", listed)
	require.Equal(t, localenv.Repo, jobRun.Repo)
	require.Equal(t, fmt.Sprintf("job-%d", job), jobRun.Job.Name)
	require.Equal(t, "ci", jobRun.Job.Workflow)
	require.Contains(t, jobRun.Job.URL, fmt.Sprintf("/job/%d", job))
	require.Equal(t, "its runner ran it", jobRun.Job.Ran())
	require.Positive(t, jobRun.ProvisionSeconds, "from the claim to the job started on its runner")
	code, listed, errOut := w.hangarCmd(t, "runs", "--since", "1d")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, listed, fmt.Sprintf("job %d (ci / job-%d)", job, job))
	// hangar status shows the jobs queue beside the pools.
	code, listed, errOut = w.hangarCmd(t, "status", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var status struct{ Jobs *operator.JobsStatus }
	require.NoError(t, json.Unmarshal([]byte(listed), &status))
	require.NotNil(t, status.Jobs, listed)
	require.Zero(t, status.Jobs.DeadLetters)
	code, listed, errOut = w.hangarCmd(t, "status")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, listed, "JOBS QUEUE")

	// Everything green, the job's deliveries among them: doctor exits 0 with no failure and no
	// warning.
	code, findings = w.doctor(t, quotas)
	require.Equal(t, 0, code, "%+v", findings)
	for _, f := range findings {
		require.Equal(t, doctor.OK, f.Status, "%+v", f)
	}
	checked := map[string]bool{}
	for _, f := range findings {
		checked[f.Check] = true
	}
	for _, c := range []string{"quota.lambda", "quota.vcpu", "oidc", "pool.image", "pool.subnets", "pool.securityGroups", "pool.imageContract", "app.credentials",
		"app.permissions", "app.installations", "app.webhook", "app.deliveries", "webhook", "jobs.deadLetters", "stack.github"} {
		require.True(t, checked[c], "doctor checks %s", c)
	}

	// What would stop a job, each named with its fix: a permission taken from the App, a Lambda
	// quota too small for the reservations, deliveries the webhook failed.
	w.gh.SetAppPermission("actions", "")
	quotas.SetLambda(120, 0)
	w.jobs.SetFailEvery(1)
	lost := w.gh.QueueJob(localenv.Repo, []string{"self-hosted", "hangar", "linux-x64"}, "true")
	require.NoError(t, localenv.Eventually(ctx, time.Minute, "the queued delivery failed", func(context.Context) (bool, error) {
		for _, d := range w.gh.Deliveries() {
			if d.JobID == lost && d.Status == 503 {
				return true, nil
			}
		}
		return false, nil
	}))
	code, findings = w.doctor(t, quotas)
	require.Equal(t, 1, code)
	fails := failing(findings)
	require.Contains(t, fails["app.permissions"], "actions: read")
	require.Contains(t, fixOf(findings, "app.permissions"), "accept the new permissions")
	require.Contains(t, fails["quota.lambda"], "120")
	require.Contains(t, fixOf(findings, "quota.lambda"), "L-B99A9384")
	require.Contains(t, fails["app.deliveries"], "503")
	w.jobs.SetFailEvery(0)

	// Before a deploy, doctor checks the synthesized template against the account: a missing
	// image, a vCPU quota too small for the pool's cap, the Lambda quota.
	quotas.SetQuota("ec2", "L-1216C47A", 8)
	tpl, err := w.d.Synth(ctx, emustack.Settings{Idle: pooldoc.DefaultTimeouts.Idle.D(), AMI: "ami-0123456789abcdef0"})
	require.NoError(t, err)
	code, findings = w.doctorArgs(t, quotas, "--template", tpl)
	require.Equal(t, 1, code)
	fails = failing(findings)
	require.Contains(t, fails["pool.image"], "ami-0123456789abcdef0")
	require.Contains(t, fixOf(findings, "pool.image"), "image")
	require.Contains(t, fails["quota.vcpu"], "L-1216C47A")
	require.Contains(t, fixOf(findings, "quota.vcpu"), "ask for 40")
	require.Contains(t, fails["quota.lambda"], "120")
	require.Contains(t, fixOf(findings, "oidc"), "github.oidcProviderArn", "the account has the provider the template would create")

	// A pool document pointed at another GitHub server (SSM is writable by more than deploy):
	// neither doctor nor setup shows the App's key to it.
	ssmc := ssm.NewFromConfig(w.e.AWS)
	name := pooldoc.ParameterName(w.e.Stack, w.e.Pool)
	param, err := ssmc.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(name)})
	require.NoError(t, err)
	forged := strings.Replace(aws.ToString(param.Parameter.Value), `"githubUrl":"`+w.gh.URL()+`"`, `"githubUrl":"https://evil.example"`, 1)
	require.NotEqual(t, aws.ToString(param.Parameter.Value), forged)
	_, err = ssmc.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(name), Value: aws.String(forged), Overwrite: aws.Bool(true)})
	require.NoError(t, err)
	code, findings = w.doctor(t, quotas)
	require.Equal(t, 1, code)
	require.Contains(t, failing(findings)["stack.github"], "evil.example")
	for _, f := range findings {
		require.False(t, strings.HasPrefix(f.Check, "app."), "no App check runs against a server the stack was not deployed for: %+v", f)
	}
	code, said, refused := runHangar(t, w.e.Environ(), "setup", "--stack", w.e.Stack)
	require.Equal(t, 1, code)
	require.Contains(t, refused, "evil.example", "setup refuses before it serves a page")
	require.NotContains(t, said, "Open this address")
}

// accountQuotas stands in for the account's quotas (which the emulators do not answer) with an
// established account's: Lambda's 1,000 and 64 standard on-demand vCPUs; and gives the account
// GitHub's OIDC provider, which the emulator's stack only names.
func (w *deployedWorld) accountQuotas(t *testing.T) *quotafake.Server {
	t.Helper()
	q := quotafake.New()
	t.Cleanup(q.Close)
	q.SetQuota("ec2", "L-1216C47A", 64)
	_, err := iam.NewFromConfig(w.e.AWS).CreateOpenIDConnectProvider(testbed.Context(t, time.Minute), &iam.CreateOpenIDConnectProviderInput{
		Url: aws.String("https://token.actions.githubusercontent.com"), ClientIDList: []string{"sts.amazonaws.com"},
		ThumbprintList: []string{"6938fd4d98bab03faadb97b34396831e3780aea1"}})
	var exists *iamtypes.EntityAlreadyExistsException
	if !errors.As(err, &exists) {
		require.NoError(t, err)
	}
	return q
}

// doctor runs hangar doctor on the deployed stack and returns its exit code and findings.
func (w *deployedWorld) doctor(t *testing.T, q *quotafake.Server) (int, []doctor.Finding) {
	t.Helper()
	return w.doctorArgs(t, q)
}

func (w *deployedWorld) doctorArgs(t *testing.T, q *quotafake.Server, args ...string) (int, []doctor.Finding) {
	t.Helper()
	env := append(append(w.e.Environ(), q.Env()...), "HTTP_PROXY="+w.jobs.HTTPProxy)
	code, out, stderr := runHangar(t, env, append([]string{"doctor", "--stack", w.e.Stack, "-o", "json"}, args...)...)
	var res struct{ Findings []doctor.Finding }
	require.NoError(t, json.Unmarshal([]byte(out), &res), "%s\n%s", out, stderr)
	return code, res.Findings
}

// hangarCmd runs the built hangar on the world's stack and returns its exit code and outputs.
func (w *deployedWorld) hangarCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runHangar(t, w.e.Environ(), append(args, "--stack", w.e.Stack)...)
}

// failing returns the failed findings' details by check, joined.
func failing(fs []doctor.Finding) map[string]string {
	out := map[string]string{}
	for _, f := range fs {
		if f.Status == doctor.Fail {
			out[f.Check] += f.Detail + "\n"
		}
	}
	return out
}

// fixOf returns the fixes of a check's failed findings, joined.
func fixOf(fs []doctor.Finding, check string) string {
	var out []string
	for _, f := range fs {
		if f.Check == check && f.Status == doctor.Fail {
			out = append(out, f.Fix)
		}
	}
	return strings.Join(out, "\n")
}
