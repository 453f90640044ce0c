// Package doctor checks a deployment for what would stop a job, each finding with its fix: the
// GitHub App (its permissions and event, its installations against the stack's trust set, its
// deliveries, the webhook answering), the account (Lambda concurrency, EC2 vCPU quotas, GitHub's
// OIDC provider), the pools (images, subnets, security groups, the runner version) and the jobs
// queue's dead letters. Before a deploy it checks the synthesized template against the account.
package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
)

// Status is a finding's verdict.
type Status string

// The verdicts: ok; warn (works now, will not, or costs); fail (stops jobs).
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "fail"
)

// Finding is one check's verdict, what it saw, and what to do.
type Finding struct {
	Check  string `json:"check"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Deps are what the checks read.
type Deps struct {
	// Stack is the stack's pool documents: deployed, or read from the template before a deploy.
	Stack *pooldoc.Stack
	// Template is the stack's CloudFormation template (deployed, or synthesized by cdk synth).
	Template map[string]any
	// Outputs are the deployed stack's outputs; nil before a deploy, when only the account's
	// side is checked.
	Outputs map[string]string
	// StackExists reports whether a deployed stack is checked (false: before a deploy).
	StackExists bool
	// GitHubAPI is the GitHub API the stack's functions use, from its template
	// (TemplateGitHubAPI): the App's key is shown to no other server.
	GitHubAPI string

	EC2     awsapi.EC2Inventory
	Quotas  awsapi.ServiceQuotas
	Lambda  awsapi.LambdaAccount
	IAM     awsapi.IAMProviders
	SQS     awsapi.SQS
	Secrets awsapi.SecretsManager
	// Broken reads a pool's spec whose instances failed the image contract (state.Store.Broken);
	// nil before a deploy.
	Broken func(ctx context.Context, pool string) (*state.BrokenSpec, error)
	// HTTP reaches GitHub and the webhook.
	HTTP *http.Client
	Now  func() time.Time
}

// Run runs every check and returns the findings, in a fixed order.
func Run(ctx context.Context, d Deps) []Finding {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.HTTP == nil {
		d.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	var out []Finding
	add := func(fs ...Finding) { out = append(out, fs...) }
	add(lambdaQuota(ctx, d))
	add(vcpuQuotas(ctx, d)...)
	add(oidcProvider(ctx, d))
	add(poolResources(ctx, d)...)
	if d.StackExists && d.Broken != nil {
		add(imageContract(ctx, d)...)
	}
	if d.StackExists {
		add(runnerVersions(ctx, d)...)
		if jobsStack(d.Stack) {
			server := gitHubServer(d)
			add(server)
			if server.Status == OK {
				add(appChecks(ctx, d)...)
			}
			add(deadLetters(ctx, d))
		}
	}
	return out
}

// Failed reports whether any finding failed.
func Failed(fs []Finding) bool {
	for _, f := range fs {
		if f.Status == Fail {
			return true
		}
	}
	return false
}

// jobsStack reports whether some pool serves label-routed jobs.
func jobsStack(s *pooldoc.Stack) bool {
	for _, d := range s.Pools {
		if d.Jobs != nil {
			return true
		}
	}
	return false
}

func ok(check, detail string) Finding { return Finding{Check: check, Status: OK, Detail: detail} }

func failed(check, detail, fix string) Finding {
	return Finding{Check: check, Status: Fail, Detail: detail, Fix: fix}
}

func warned(check, detail, fix string) Finding {
	return Finding{Check: check, Status: Warn, Detail: detail, Fix: fix}
}

// resources returns the template's resources of type typ, by logical id.
func resources(tpl map[string]any, typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	rs, _ := tpl["Resources"].(map[string]any)
	for id, r := range rs {
		r, _ := r.(map[string]any)
		if r != nil && r["Type"] == typ {
			props, _ := r["Properties"].(map[string]any)
			if props == nil {
				props = map[string]any{}
			}
			out[id] = props
		}
	}
	return out
}

// envGitHubAPI is the variable the stack's functions read the GitHub API from
// (jobswire.EnvGitHubAPIURL).
const envGitHubAPI = "HANGAR_GITHUB_API_URL"

// TemplateGitHubAPI returns the GitHub API the template's functions are given: what the App's
// key may be shown to. The pool documents name the server too, but whoever may write them (SSM)
// may not deploy the stack, and must not be able to point the operator's key elsewhere.
func TemplateGitHubAPI(tpl map[string]any) string {
	for _, fn := range resources(tpl, "AWS::Lambda::Function") {
		env, _ := fn["Environment"].(map[string]any)
		vars, _ := env["Variables"].(map[string]any)
		if v, ok := vars[envGitHubAPI].(string); ok && v != "" {
			return v
		}
	}
	return ""
}

// ParseTemplate reads a CloudFormation template (JSON, as the CDK synthesizes it).
func ParseTemplate(body []byte) (map[string]any, error) {
	var tpl map[string]any
	if err := json.Unmarshal(body, &tpl); err != nil {
		return nil, fmt.Errorf("the template is not JSON (want cdk.out/<stack>.template.json): %w", err)
	}
	if _, ok := tpl["Resources"].(map[string]any); !ok {
		return nil, errors.New("the template has no Resources: want cdk.out/<stack>.template.json")
	}
	return tpl, nil
}

// PoolsFromTemplate reads the pool documents a synthesized template will publish: their JSON
// with what only a deploy knows (the account, the queues' URLs) left empty.
func PoolsFromTemplate(stack string, tpl map[string]any) (*pooldoc.Stack, error) {
	s := &pooldoc.Stack{Name: stack}
	prefix := pooldoc.ParameterPath(stack)
	for id, p := range resources(tpl, "AWS::SSM::Parameter") {
		name, _ := p["Name"].(string)
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		var d pooldoc.Document
		if err := json.Unmarshal([]byte(flatten(p["Value"])), &d); err != nil {
			return nil, fmt.Errorf("the template's pool document %s (%s): %w", name, id, err)
		}
		s.Pools = append(s.Pools, &d)
	}
	if len(s.Pools) == 0 {
		return nil, fmt.Errorf("the template publishes no pool document under %s: is it stack %s's template?", prefix, stack)
	}
	return s, nil
}

// flatten evaluates a template value to a string, the references a deploy resolves left empty.
func flatten(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case map[string]any:
		if j, ok := v["Fn::Join"].([]any); ok && len(j) == 2 {
			sep, _ := j[0].(string)
			parts, _ := j[1].([]any)
			out := make([]string, len(parts))
			for i, p := range parts {
				out[i] = flatten(p)
			}
			return strings.Join(out, sep)
		}
	}
	return ""
}

// imageContract checks no pool's current spec failed the image contract: none more of it is
// launched until a deploy changes it (docs/configuration.md, "The image").
func imageContract(ctx context.Context, d Deps) []Finding {
	const check = "pool.imageContract"
	var out []Finding
	for _, doc := range d.Stack.Pools {
		b, err := d.Broken(ctx, doc.Name)
		switch {
		case err != nil:
			out = append(out, warned(check, fmt.Sprintf("pool %s: %v", doc.Name, err), ""))
		case b != nil && b.Spec == doc.SpecHash:
			out = append(out, failed(check, fmt.Sprintf("pool %s's instances of its spec %s failed the image contract at %s, and none more is launched: %s",
				doc.Name, b.Spec, b.At.UTC().Format(time.RFC3339), b.Reason),
				"add the pieces named to the image and deploy: the new spec launches; a fix the spec does not see (a new AMI behind the same SSM parameter) needs the mark deleted (docs/configuration.md, \"The image\")"))
		default:
			out = append(out, ok(check, fmt.Sprintf("pool %s: no instance of its spec failed the image contract", doc.Name)))
		}
	}
	return out
}
