package doctor

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/operator/setup"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/platform/ghapp"
	"github.com/hangar-ci/hangar/pkg/platform/ghclient"
	"github.com/hangar-ci/hangar/pkg/platform/ghurl"
)

// deliveriesWindow is how far back the deliveries are read: a day of GitHub's traffic.
const deliveriesWindow = 24 * time.Hour

// runnerAgeOut is GitHub's rule: a runner not updated within 30 days of a newer release gets no
// more jobs.
const runnerAgeOut = 30 * 24 * time.Hour

// runnerWarnBefore is how long before a pinned runner ages out the check warns.
const runnerWarnBefore = 7 * 24 * time.Hour

// secret reads a secret's current value.
func secret(ctx context.Context, d Deps, arn string) (string, error) {
	out, err := d.Secrets.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.SecretString), nil
}

// appChecks are the GitHub App's: its credentials, permissions and event, its installations
// against the trust set, its recent deliveries, and the webhook answering.
func appChecks(ctx context.Context, d Deps) []Finding {
	const setupFix = "run hangar setup (docs/labels.md)"
	raw, err := secret(ctx, d, d.Outputs["AppSecretArn"])
	var none *smtypes.ResourceNotFoundException
	if errors.As(err, &none) {
		return []Finding{failed("app.credentials", "the App secret "+d.Outputs["AppSecretArn"]+" holds no value yet: no App is registered", setupFix)}
	}
	if err != nil {
		return []Finding{failed("app.credentials", fmt.Sprintf("could not read the App secret %s: %v", d.Outputs["AppSecretArn"], err), "allow secretsmanager:GetSecretValue on it to the identity running hangar doctor")}
	}
	creds, err := ghapp.ParseCredentials(raw)
	if err != nil {
		return []Finding{failed("app.credentials", "the App secret holds no App: "+err.Error(), setupFix)}
	}
	gh := ghapp.New(d.GitHubAPI, func(context.Context, bool) (ghapp.Credentials, error) { return creds, nil }, d.HTTP.Transport)
	app, err := gh.AppClient()
	if err != nil {
		return []Finding{failed("app.credentials", err.Error(), setupFix)}
	}
	got, err := app.App(ctx)
	if err != nil {
		return []Finding{failed("app.credentials", fmt.Sprintf("GitHub refuses App %d's key: %v", creds.AppID, err), "generate a new key in the App's settings and run hangar setup again, or put the key in the App secret")}
	}
	out := []Finding{ok("app.credentials", fmt.Sprintf("App %d (%s), owned by %s", got.ID, got.Slug, got.Owner))}
	out = append(out, appPermissions(d, got))
	ins, err := app.InstallationsDetail(ctx, 10)
	if err != nil {
		out = append(out, failed("app.installations", err.Error(), ""))
	} else {
		out = append(out, installations(ctx, d, gh, got, ins)...)
	}
	out = append(out, hookConfig(ctx, d, app), deliveries(ctx, d, app), webhookAnswers(ctx, d))
	return out
}

// gitHubServer checks the pool documents name the GitHub server the stack was deployed for:
// the documents are SSM parameters, which more identities may write than may deploy the stack.
func gitHubServer(d Deps) Finding {
	const check = "stack.github"
	if d.GitHubAPI == "" {
		return failed(check, "the stack's template gives its functions no GitHub API URL", "deploy the stack again")
	}
	if err := SameGitHub(d.Stack, d.GitHubAPI); err != nil {
		return failed(check, err.Error()+"; the App's checks are not run",
			"find who wrote /hangar/<stack>/pools/ (CloudTrail, ssm:PutParameter) and deploy the stack again")
	}
	return ok(check, "the pools serve the GitHub server the stack was deployed for: "+d.GitHubAPI)
}

// SameGitHub says which of the stack's pool documents names another GitHub server than api, the
// one its template gives its functions (TemplateGitHubAPI); nil when none does. Whoever shows the
// App's key to GitHub asks first: the documents are SSM parameters, which more identities may
// write than may deploy the stack.
func SameGitHub(s *pooldoc.Stack, api string) error {
	for _, doc := range s.Pools {
		if got := ghurl.APIURL(doc.GitHubURL); got != api {
			return fmt.Errorf("pool %s's document names GitHub server %s (API %s), but the stack was deployed for %q: the document was changed outside a deploy", doc.Name, doc.GitHubURL, got, api)
		}
	}
	return nil
}

// hookConfig checks GitHub delivers the App's webhook to the stack's Function URL, as JSON, over
// verified TLS: the webhook check proves the function answers, this that GitHub sends it there.
func hookConfig(ctx context.Context, d Deps, app *ghclient.AppClient) Finding {
	const check = "app.webhook"
	c, err := app.HookConfig(ctx)
	if err != nil {
		return failed(check, err.Error(), "")
	}
	fix := fmt.Sprintf("in the App's settings, General: Webhook URL %s, Active; then Advanced: content type application/json, SSL verification on", d.Outputs["WebhookUrl"])
	switch {
	case c.URL != d.Outputs["WebhookUrl"]:
		return failed(check, fmt.Sprintf("GitHub delivers the App's webhook to %q, not the stack's Function URL %s: no job reaches the stack", c.URL, d.Outputs["WebhookUrl"]), fix)
	case c.ContentType != "json":
		return failed(check, fmt.Sprintf("the App's webhook content type is %q: the function reads JSON bodies", c.ContentType), fix)
	case c.InsecureSSL:
		return failed(check, "the App's webhook skips TLS verification", fix)
	}
	return ok(check, "GitHub delivers the App's webhook to the stack's Function URL, as JSON")
}

// orgScoped reports whether some pool's runners are organisation runners.
func orgScoped(s *pooldoc.Stack) bool {
	for _, d := range s.Pools {
		if d.Jobs != nil && d.Jobs.OrgScope() {
			return true
		}
	}
	return false
}

// appPermissions checks the App asks for what label-routed jobs need, and the one event.
func appPermissions(d Deps, app ghapi.App) Finding {
	const check = "app.permissions"
	var missing []string
	for k, v := range setup.Permissions(orgScoped(d.Stack)) {
		if got := app.Permissions[k]; got != v && got != "write" {
			missing = append(missing, fmt.Sprintf("%s: %s (has %q)", k, v, got))
		}
	}
	for _, e := range setup.Events {
		if !slices.Contains(app.Events, e) {
			missing = append(missing, "the "+e+" event")
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		return failed(check, "the App lacks "+strings.Join(missing, ", ")+": its jobs are never placed",
			fmt.Sprintf("in the App's settings (%s), Permissions & events: grant them; then accept the new permissions on each installation", app.HTMLURL))
	}
	return ok(check, "the App has the permissions and the workflow_job event label-routed jobs need")
}

// installations checks every repository of the trust set is reached by an installation that
// accepted the permissions, and says which installations reach beyond it.
func installations(ctx context.Context, d Deps, gh *ghapp.App, app ghapi.App, ins []ghapi.Installation) []Finding {
	const check = "app.installations"
	trust := trustSet(d.Stack)
	allowed := installationsAllowed(d.Stack)
	reached := map[string]int64{} // lower-case owner/name (or owner/* for an account-wide one) → installation
	var out []Finding
	need := setup.Permissions(orgScoped(d.Stack))
	for _, in := range ins {
		if in.Suspended {
			out = append(out, warned(check, fmt.Sprintf("installation %d on %s is suspended", in.ID, in.Account), "unsuspend it in the account's installed Apps"))
			continue
		}
		if len(allowed) > 0 && !slices.Contains(allowed, in.ID) {
			continue // the stack refuses its deliveries anyway (github.installations)
		}
		var lacks []string
		for k, v := range need {
			if got := in.Permissions[k]; got != v && got != "write" {
				lacks = append(lacks, k+": "+v)
			}
		}
		if len(lacks) > 0 {
			sort.Strings(lacks)
			out = append(out, failed(check, fmt.Sprintf("installation %d on %s has not accepted %s", in.ID, in.Account, strings.Join(lacks, ", ")),
				"accept the App's new permissions in "+in.Account+"'s installed Apps"))
		}
		if in.AllRepositories {
			reached[strings.ToLower(in.Account)+"/*"] = in.ID
		}
		c, err := gh.Client(in.ID, ghapi.Scope{Owner: in.Account})
		if err != nil {
			out = append(out, failed(check, err.Error(), ""))
			continue
		}
		repos, _, err := c.Repositories(ctx, 10)
		if err != nil {
			out = append(out, failed(check, fmt.Sprintf("installation %d on %s: %v", in.ID, in.Account, err), ""))
			continue
		}
		var outside []string
		for _, r := range repos {
			reached[strings.ToLower(r.FullName)] = in.ID
			if !inTrust(trust, r.FullName) {
				outside = append(outside, r.FullName)
			}
		}
		if len(outside) > 0 {
			out = append(out, warned(check, fmt.Sprintf("installation %d on %s reaches %s, outside the stack's trust set: their jobs are refused, each costing a webhook invocation", in.ID, in.Account, strings.Join(outside, ", ")),
				"install the App on the stack's repositories alone (Only select repositories)"))
		}
	}
	var missing []string
	for _, r := range trust {
		key := strings.ToLower(r)
		owner, _, _ := strings.Cut(key, "/")
		if _, ok := reached[key]; ok {
			continue
		}
		if _, ok := reached[owner+"/*"]; ok {
			continue
		}
		if strings.HasSuffix(key, "/*") && anyOf(reached, owner+"/") {
			continue
		}
		missing = append(missing, r)
	}
	if len(missing) > 0 {
		return append(out, failed(check, "no installation of the App reaches "+strings.Join(missing, ", ")+": their label-routed jobs get no runner",
			"install the App on them: "+setup.InstallURL(d.Stack.Pools[0].GitHubURL, app.Slug)))
	}
	return append(out, ok(check, fmt.Sprintf("every repository of the trust set (%s) is reached by an installation", strings.Join(trust, ", "))))
}

func anyOf(m map[string]int64, prefix string) bool {
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

// trustSet is the repositories the stack's label-routed pools serve.
func trustSet(s *pooldoc.Stack) []string {
	var out []string
	for _, d := range s.Pools {
		if d.Jobs == nil {
			continue
		}
		for _, r := range d.AllowedRepositories {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	sort.Strings(out)
	return out
}

// installationsAllowed is the stack's github.installations (empty: any).
func installationsAllowed(s *pooldoc.Stack) []int64 {
	for _, d := range s.Pools {
		if d.Jobs != nil && len(d.Jobs.Installations) > 0 {
			return d.Jobs.Installations
		}
	}
	return nil
}

// inTrust reports whether repo is in the trust set (owner/name or owner/*).
func inTrust(trust []string, repo string) bool {
	owner, _, _ := strings.Cut(repo, "/")
	for _, t := range trust {
		if strings.EqualFold(t, repo) || strings.EqualFold(t, owner+"/*") {
			return true
		}
	}
	return false
}

// deliveries checks the App's deliveries of the last day: failed ones are jobs that may wait
// for the sweep, or never start.
func deliveries(ctx context.Context, d Deps, app *ghclient.AppClient) Finding {
	const check = "app.deliveries"
	page, _, err := app.HookDeliveries(ctx, "")
	if err != nil {
		return failed(check, err.Error(), "")
	}
	since := d.Now().Add(-deliveriesWindow)
	byStatus := map[int]int{}
	total := 0
	for _, dl := range page {
		if dl.At.Before(since) {
			continue
		}
		total++
		if dl.StatusCode < 200 || dl.StatusCode >= 300 {
			byStatus[dl.StatusCode]++
		}
	}
	if total == 0 {
		return warned(check, "no delivery in the last day: if jobs were queued for the stack's labels, GitHub is not sending their events",
			"check app.webhook and app.permissions; a job queued now should show up in the App's Advanced → Recent Deliveries")
	}
	if len(byStatus) == 0 {
		return ok(check, fmt.Sprintf("%d deliveries in the last day, none failed", total))
	}
	codes := make([]int, 0, len(byStatus))
	for c := range byStatus {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var parts []string
	fix := ""
	status := Warn
	for _, c := range codes {
		label := strconv.Itoa(c)
		switch {
		case c == 0:
			label = "no answer"
			status, fix = Fail, "the webhook did not answer: check the webhook function's log group and its concurrency (hangar doctor's quota.lambda)"
		case c == http.StatusUnauthorized:
			status, fix = Fail, "the App's webhook secret and the stack's differ: run hangar setup again, or put the App's webhook secret in "+d.Outputs["WebhookSecretArn"]
		case c >= 500:
			status, fix = Fail, "the webhook function failed or was throttled: check its log group and the account's Lambda concurrency; the sweep redelivers what it finds lost"
		case c == http.StatusForbidden && fix == "":
			fix = "deliveries refused by the trust set: install the App on the stack's repositories alone"
		}
		parts = append(parts, fmt.Sprintf("%d × %s", byStatus[c], label))
	}
	return Finding{Check: check, Status: status, Detail: fmt.Sprintf("%d of %d deliveries in the last day failed: %s", sum(byStatus), total, strings.Join(parts, ", ")), Fix: fix}
}

func sum(m map[int]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// webhookAnswers sends the webhook a ping signed with the stack's webhook secret (it must answer
// pong) and an unsigned one (it must refuse).
func webhookAnswers(ctx context.Context, d Deps) Finding {
	const check = "webhook"
	url := d.Outputs["WebhookUrl"]
	key, err := secret(ctx, d, d.Outputs["WebhookSecretArn"])
	if err != nil {
		return failed(check, fmt.Sprintf("could not read the webhook secret: %v", err), "allow secretsmanager:GetSecretValue on it to the identity running hangar doctor")
	}
	body := []byte(`{"zen":"hangar doctor","hook_id":0}`)
	post := func(sign bool) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "ping")
		req.Header.Set("X-GitHub-Delivery", "hangar-doctor-"+strconv.FormatInt(d.Now().UnixNano(), 36))
		if sign {
			mac := hmac.New(sha256.New, []byte(key))
			mac.Write(body)
			req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		}
		resp, err := d.HTTP.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode, strings.TrimSpace(string(b)), nil
	}
	code, text, err := post(true)
	if err != nil || code != http.StatusOK || !strings.Contains(text, "pong") {
		return failed(check, fmt.Sprintf("a signed ping to %s: %d %q %v", url, code, text, err),
			"check the webhook function's log group; the stack's WebhookUrl output is the App's webhook URL")
	}
	if code, _, err := post(false); err != nil || code != http.StatusUnauthorized {
		return failed(check, fmt.Sprintf("an unsigned ping to %s was answered %d (%v), not 401", url, code, err), "deploy the stack's webhook function again")
	}
	return ok(check, "the webhook answers a signed ping with pong and refuses an unsigned one")
}

// deadLetters checks the jobs queue's dead letters: jobs the dispatcher gave up on.
func deadLetters(ctx context.Context, d Deps) Finding {
	const check = "jobs.deadLetters"
	dlq := d.Outputs["JobsDeadLetterQueueUrl"]
	if dlq == "" {
		return warned(check, "the stack names no jobs dead-letter queue", "")
	}
	out, err := d.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(dlq),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil {
		return warned(check, fmt.Sprintf("could not read the jobs dead-letter queue: %v", err), "")
	}
	n, _ := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
	if n > 0 {
		return failed(check, fmt.Sprintf("%d jobs in the jobs dead-letter queue: they were never placed", n),
			"read why in the dispatcher's log group, fix it, then redrive the queue (docs/operations.md)")
	}
	return ok(check, "no dead letters")
}

// runnerVersions checks each pool's pinned runner against GitHub's releases: GitHub stops
// giving jobs to a runner 30 days after a newer release.
func runnerVersions(ctx context.Context, d Deps) []Finding {
	const check = "runner.version"
	var pinned []*pooldoc.Document
	for _, doc := range d.Stack.Pools {
		if doc.Runner.Version != "" {
			pinned = append(pinned, doc)
		}
	}
	if len(pinned) == 0 {
		return nil
	}
	api := d.GitHubAPI
	if api == "" {
		api = ghurl.APIURL(d.Stack.Pools[0].GitHubURL)
	}
	releases, err := ghclient.RunnerReleases(ctx, api, d.HTTP)
	if err != nil || len(releases) == 0 {
		return []Finding{warned(check, fmt.Sprintf("could not read the runner's releases: %v", err), "")}
	}
	var out []Finding
	for _, doc := range pinned {
		// The first release newer than the pinned one starts GitHub's 30 days.
		var next *ghapi.Release
		for i := range releases {
			if newer(releases[i].Version, doc.Runner.Version) && (next == nil || releases[i].PublishedAt.Before(next.PublishedAt)) {
				next = &releases[i]
			}
		}
		if next == nil {
			out = append(out, ok(check, fmt.Sprintf("pool %s runs runner %s, the current release", doc.Name, doc.Runner.Version)))
			continue
		}
		ages := next.PublishedAt.Add(runnerAgeOut)
		detail := fmt.Sprintf("pool %s pins runner %s; %s was released %s, so GitHub stops giving it jobs on %s", doc.Name, doc.Runner.Version,
			next.Version, next.PublishedAt.Format("2006-01-02"), ages.Format("2006-01-02"))
		fix := fmt.Sprintf("set the pool's runner.version to %s (and its checksums) and deploy", releases[0].Version)
		switch {
		case !d.Now().Before(ages):
			out = append(out, failed(check, detail, fix))
		case d.Now().Add(runnerWarnBefore).After(ages):
			out = append(out, warned(check, detail, fix))
		default:
			out = append(out, ok(check, detail))
		}
	}
	return out
}

// newer reports whether version a (major.minor.patch) is newer than b.
func newer(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(pa), len(pb)); i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x > y
		}
	}
	return false
}
