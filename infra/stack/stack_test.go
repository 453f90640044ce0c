package stack_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/infra/config"
	"github.com/hangar-ci/hangar/infra/stack"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// template is the example config's synthesized template, and jobsTemplate testdata/hangar.jobs.yaml's
// (label-routed jobs), made once: the jsii runtime starts once per test binary.
var template, jobsTemplate map[string]any

// assets are stand-in builds of what the stack ships.
var assets stack.Assets

func TestMain(m *testing.M) {
	code := func() int {
		defer jsii.Close()
		dir, err := os.MkdirTemp("", "hangar-infra-test-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		// Stand-in builds: the template depends on the files' hashes, not on what they are.
		for _, f := range []string{"agent-linux-amd64", "agent-linux-arm64", "hangar-runas-linux-amd64", "hangar-runas-linux-arm64", "refresh/bootstrap", "webhook/bootstrap"} {
			p := filepath.Join(dir, f)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				panic(err)
			}
			if err := os.WriteFile(p, []byte("stand-in "+f), 0o755); err != nil {
				panic(err)
			}
		}
		assets = stack.Assets{AgentDir: dir, RefreshDir: filepath.Join(dir, "refresh"), WebhookDir: filepath.Join(dir, "webhook")}
		template = synthesize("../hangar.example.yaml", filepath.Join(dir, "cdk.out"))
		jobsTemplate = synthesize(jobsConfig, filepath.Join(dir, "cdk.out.jobs"))
		return m.Run()
	}()
	os.Exit(code)
}

// synthesize returns the template of the config at path, with the stand-in assets.
func synthesize(path, out string) map[string]any {
	cfg, err := config.Load(path)
	if err != nil {
		panic(err)
	}
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(out)})
	st, err := stack.New(app, cfg, assets, nil)
	if err != nil {
		panic(err)
	}
	return templateOf(st)
}

// templateOf is a stack's synthesized template, as plain JSON values.
func templateOf(st awscdk.Stack) map[string]any {
	b, err := json.Marshal(assertions.Template_FromStack(st, nil).ToJSON())
	if err != nil {
		panic(err)
	}
	var tpl map[string]any
	if err := json.Unmarshal(b, &tpl); err != nil {
		panic(err)
	}
	return tpl
}

// resources returns the example template's resources of a type, by logical id.
func resources(typ string) map[string]map[string]any { return resourcesIn(template, typ) }

// resourcesIn returns tpl's resources of a type (their properties), by logical id.
func resourcesIn(tpl map[string]any, typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range tpl["Resources"].(map[string]any) {
		if r := r.(map[string]any); r["Type"] == typ {
			props, _ := r["Properties"].(map[string]any)
			out[id] = props
		}
	}
	return out
}

func only(t *testing.T, typ string) map[string]any {
	t.Helper()
	rs := resources(typ)
	require.Len(t, rs, 1, typ)
	for _, p := range rs {
		return p
	}
	return nil
}

func js(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestTable(t *testing.T) {
	p := only(t, "AWS::DynamoDB::Table")
	require.Equal(t, "PAY_PER_REQUEST", p["BillingMode"])
	require.Equal(t, true, p["SSESpecification"].(map[string]any)["SSEEnabled"], "encrypted")
	require.Equal(t, true, p["PointInTimeRecoverySpecification"].(map[string]any)["PointInTimeRecoveryEnabled"])
	require.Equal(t, map[string]any{"AttributeName": state.AttrTTL, "Enabled": true}, p["TimeToLiveSpecification"])
	require.Equal(t, "hangar-instances", p["TableName"])
	require.JSONEq(t, js([]any{map[string]any{"AttributeName": state.AttrARN, "KeyType": "HASH"}}), js(p["KeySchema"]))
	gsis := js(p["GlobalSecondaryIndexes"])
	for _, want := range []string{state.IndexByRun, state.IndexByPoolState, state.AttrRunID, state.AttrPoolStateShard, state.AttrThreshold} {
		require.Contains(t, gsis, want)
	}
	require.Equal(t, 2, strings.Count(gsis, `"ProjectionType":"ALL"`))
}

// TestNoTokenKey: runner secrets ride the doorbells, so the stack holds no key to seal them with
// and no role may use KMS.
func TestNoTokenKey(t *testing.T) {
	require.Empty(t, resources("AWS::KMS::Key"))
	for roles, ss := range statements(t) {
		require.NotContains(t, js(ss), `"kms:`, roles)
	}
}

func TestQueuesEncrypted(t *testing.T) {
	qs := resources("AWS::SQS::Queue")
	require.Len(t, qs, 2, "one queue and one dead-letter queue for the example's pool")
	for id, q := range qs {
		require.Equal(t, true, q["SqsManagedSseEnabled"], id)
	}
	require.Contains(t, js(resources("AWS::SQS::QueuePolicy")), "aws:SecureTransport", "TLS only")
}

func TestLaunchTemplate(t *testing.T) {
	lt := only(t, "AWS::EC2::LaunchTemplate")
	data := lt["LaunchTemplateData"].(map[string]any)
	md := data["MetadataOptions"].(map[string]any)
	require.Equal(t, "required", md["HttpTokens"], "IMDSv2 only")
	require.EqualValues(t, 1, md["HttpPutResponseHopLimit"])
	require.Equal(t, "terminate", data["InstanceInitiatedShutdownBehavior"])
	ebs := data["BlockDeviceMappings"].([]any)[0].(map[string]any)["Ebs"].(map[string]any)
	require.Equal(t, true, ebs["Encrypted"])
	require.Equal(t, "gp3", ebs["VolumeType"])
	require.EqualValues(t, 50, ebs["VolumeSize"])
	require.Contains(t, js(data["ImageId"]), `"Ref":"Poollinuxx64Image`)
	image := template["Parameters"].(map[string]any)["Poollinuxx64Image"].(map[string]any)
	require.Equal(t, "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>", image["Type"])
	require.Equal(t, "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64", image["Default"])
	ud := js(data["UserData"])
	for _, want := range []string{"sha256sum --check", "Restart=always", "useradd", "--stack hangar --pool linux-x64", "aws s3 cp",
		"/usr/local/bin/hangar-agent.new", "/usr/local/bin/hangar-runas.new", "install -m 0755 -o root -g root /usr/local/bin/hangar-runas.new /usr/local/bin/hangar-runas",
		"-K SUB_UID_COUNT=0 -K SUB_GID_COUNT=0", "Delegate=yes", "hangar_need+=(git)", "dnf install -y -q"} {
		require.Contains(t, ud, want)
	}
}

func TestPoolDocument(t *testing.T) {
	p := only(t, "AWS::SSM::Parameter")
	require.Equal(t, pooldoc.ParameterName("hangar", "linux-x64"), p["Name"])
	doc := js(p["Value"])
	for _, want := range []string{`\"queueUrl\"`, `\"launchTemplate\"`, `\"reuse\":\"repository\"`, `\"specHash\"`,
		`\"githubUrl\":\"https://github.com\"`} {
		require.Contains(t, doc, want)
	}
}

// function returns the logical id and properties of the Lambda function named name.
func function(t *testing.T, name string) (string, map[string]any) {
	t.Helper()
	for id, fn := range resources("AWS::Lambda::Function") {
		if fn["FunctionName"] == name {
			return id, fn
		}
	}
	t.Fatalf("no function %s", name)
	return "", nil
}

func TestRefreshFunction(t *testing.T) {
	require.Len(t, resources("AWS::Lambda::Function"), 2, "the function the workflows invoke, and the events function")
	for _, name := range []string{"hangar-refresh", "hangar-refresh-events"} {
		_, fn := function(t, name)
		require.Equal(t, "provided.al2023", fn["Runtime"], name)
		require.Equal(t, []any{"arm64"}, fn["Architectures"], name)
		require.Equal(t, "hangar", fn["Environment"].(map[string]any)["Variables"].(map[string]any)["HANGAR_STACK"], name)
	}
	rules := js(resources("AWS::Events::Rule"))
	for _, want := range []string{"rate(1 minute)", "EC2 Spot Instance Interruption Warning", "EC2 Instance State-change Notification"} {
		require.Contains(t, rules, want)
	}
}

// TestEC2EventsOnlyFromEventBridge: the schedule and EC2's events go to the events function
// alone, which EventBridge's rules alone may invoke; the workflows may invoke only the other
// function, which runs without the events mode (it refuses EC2 events, cmd/refresh).
func TestEC2EventsOnlyFromEventBridge(t *testing.T) {
	manualID, manual := function(t, pooldoc.RefreshFunction("hangar"))
	eventsID, events := function(t, pooldoc.RefreshEventsFunction("hangar"))
	vars := func(fn map[string]any) map[string]any {
		return fn["Environment"].(map[string]any)["Variables"].(map[string]any)
	}
	require.Equal(t, pooldoc.RefreshSourceEventBridge, vars(events)[pooldoc.RefreshSourceEnv])
	require.NotContains(t, vars(manual), pooldoc.RefreshSourceEnv, "the workflows' function takes no event")

	rules := resources("AWS::Events::Rule")
	require.Len(t, rules, 3)
	for id, r := range rules {
		targets := js(r["Targets"])
		require.Contains(t, targets, `"Fn::GetAtt":["`+eventsID+`","Arn"]`, "%s targets the events function", id)
		require.NotContains(t, targets, manualID, id)
	}
	perms := resources("AWS::Lambda::Permission")
	require.Len(t, perms, 3, "one per rule")
	for id, p := range perms {
		require.Equal(t, "events.amazonaws.com", p["Principal"], id)
		require.Contains(t, js(p["FunctionName"]), eventsID, id)
		require.Contains(t, js(p["SourceArn"]), "Arn", "%s: from its rule only", id)
	}

	for roles, ss := range statements(t) {
		for _, s := range ss {
			if !slices.Contains(actions(s), "lambda:InvokeFunction") {
				continue
			}
			res := js(s["Resource"])
			require.NotContains(t, res, "refresh-events", "%s may invoke the events function: %s", roles, js(s))
			require.NotContains(t, res, eventsID, roles)
			require.NotContains(t, res, "function:*", roles)
			require.NotContains(t, res, "function:hangar-refresh*", roles)
		}
	}
}

// TestSecurityGroup: a pool that names no security group gets one of its own, with no ingress,
// in its subnets' VPC, and its template uses it (not the VPC's default group).
func TestSecurityGroup(t *testing.T) {
	sgs := resources("AWS::EC2::SecurityGroup")
	require.Len(t, sgs, 1)
	var id string
	for k, sg := range sgs {
		id = k
		require.Equal(t, "vpc-0123456789abcdef0", sg["VpcId"])
		require.Empty(t, sg["SecurityGroupIngress"], "no ingress")
		require.JSONEq(t, `[{"CidrIp":"0.0.0.0/0","Description":"every egress, IPv4","IpProtocol":"-1"},{"CidrIpv6":"::/0","Description":"every egress, IPv6","IpProtocol":"-1"}]`,
			js(sg["SecurityGroupEgress"]))
	}
	require.Empty(t, resources("AWS::EC2::SecurityGroupIngress"), "no ingress added apart")
	data := only(t, "AWS::EC2::LaunchTemplate")["LaunchTemplateData"].(map[string]any)
	require.JSONEq(t, `[{"Fn::GetAtt":["`+id+`","GroupId"]}]`, js(data["SecurityGroupIds"]))
}

func TestMonitoring(t *testing.T) {
	alarms := js(resources("AWS::CloudWatch::Alarm"))
	for _, want := range []string{"ApproximateNumberOfMessagesVisible", "Orphans", "Errors"} {
		require.Contains(t, alarms, want)
	}
	dash := js(only(t, "AWS::CloudWatch::Dashboard")["DashboardBody"])
	require.Contains(t, dash, `MetricName=\\\"RunCostUSD\\\"`, "what runs cost is graphed")
	require.Contains(t, dash, "{Hangar,Pool,Repository,Stack}", "by repository and pool")
}

// statements returns every policy statement of the template, by the logical id of what holds it.
func statements(t *testing.T) map[string][]map[string]any {
	t.Helper()
	out := map[string][]map[string]any{}
	for id, p := range resources("AWS::IAM::Policy") {
		roles := js(p["Roles"])
		for _, s := range p["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			out[roles] = append(out[roles], s.(map[string]any))
		}
		_ = id
	}
	return out
}

func actions(s map[string]any) []string {
	switch a := s["Action"].(type) {
	case string:
		return []string{a}
	case []any:
		var out []string
		for _, x := range a {
			out = append(out, x.(string))
		}
		return out
	}
	return nil
}

// policyOf returns the statements attached to the role whose logical id starts with prefix.
func policyOf(t *testing.T, prefix string) []map[string]any {
	t.Helper()
	for roles, ss := range statements(t) {
		if strings.Contains(roles, `"`+prefix) {
			return ss
		}
	}
	t.Fatalf("no policy for role %s", prefix)
	return nil
}

func TestNoWildcardAction(t *testing.T) {
	for roles, ss := range statements(t) {
		for _, s := range ss {
			for _, a := range actions(s) {
				require.NotContains(t, a, "*", "%s: %s", roles, js(s))
			}
		}
	}
	for id, r := range resources("AWS::IAM::Role") {
		require.NotContains(t, js(r["Policies"]), `"Action":"*"`, id)
		require.Empty(t, r["ManagedPolicyArns"], "%s: every statement is the stack's own", id)
	}
}

func TestInstanceRole(t *testing.T) {
	ss := policyOf(t, "InstanceRole")
	all := js(ss)
	find := func(action string) map[string]any {
		for _, s := range ss {
			for _, a := range actions(s) {
				if a == action {
					return s
				}
			}
		}
		t.Fatalf("instance role: no %s", action)
		return nil
	}
	for _, a := range []string{"dynamodb:GetItem", "dynamodb:UpdateItem"} {
		require.Contains(t, js(find(a)["Condition"]), `"dynamodb:LeadingKeys":["${ec2:SourceInstanceARN}"]`, a)
	}
	update := js(find("dynamodb:UpdateItem")["Condition"])
	for _, attr := range state.AgentAttributes {
		require.Contains(t, update, `"`+attr+`"`)
	}
	require.NotContains(t, update, `"state"`, "the agent never writes the state")
	require.NotContains(t, update, `"runId"`)
	for _, home := range []string{"idleSecs", "offerTo", "retire", "historyDays"} {
		require.NotContains(t, update, `"`+home+`"`, "the way home is the control plane's: no agent points its release elsewhere or lifts a mark to retire")
	}
	require.NotContains(t, all, `"ec2:`, "no EC2 action: the agent ends its own instance by powering it off")
	bell := find("sqs:ReceiveMessage")
	require.ElementsMatch(t, []string{"sqs:ReceiveMessage", "sqs:DeleteMessage"}, actions(bell), "its doorbell: receive and delete rings, nothing else")
	require.Contains(t, js(bell["Resource"]), `":hangar_bell_*"`, "only the stack's doorbells")
	require.Contains(t, js(bell["Condition"]), `"aws:ResourceTag/hangar:instance-arn":"${ec2:SourceInstanceARN}"`, "only its own")
	for _, a := range []string{"sqs:SendMessage", "sqs:DeleteQueue", "sqs:ListQueues", "sqs:SetQueueAttributes"} {
		require.NotContains(t, all, `"`+a+`"`, "an instance can neither ring, reconfigure nor delete a doorbell (it makes its own: TestDoorbellRights)")
	}
	require.NotContains(t, all, "ec2:RunInstances")
}

func TestWorkflowRole(t *testing.T) {
	ss := policyOf(t, "WorkflowRole")
	all := js(ss)
	require.Contains(t, all, `"iam:PassedToService":"ec2.amazonaws.com"`)
	require.Contains(t, all, `"aws:RequestTag/hangar:stack":"hangar"`, "launches are tagged as the stack's")
	require.Contains(t, all, `"aws:ResourceTag/hangar:stack":"hangar"`, "starts and terminations only of the stack's instances")
	var invoke []map[string]any
	for _, s := range ss {
		if slices.Contains(actions(s), "lambda:InvokeFunction") {
			invoke = append(invoke, s)
		}
	}
	require.Len(t, invoke, 1, "refresh by hand: the workflows may invoke the refresh function")
	require.Equal(t, []string{"lambda:InvokeFunction"}, actions(invoke[0]))
	require.Contains(t, js(invoke[0]["Resource"]), `":function:hangar-refresh"`, "that function, and no other")

	var trust string
	for id, r := range resources("AWS::IAM::Role") {
		if strings.HasPrefix(id, "WorkflowRole") {
			trust = js(r["AssumeRolePolicyDocument"])
		}
	}
	require.Contains(t, trust, "sts:AssumeRoleWithWebIdentity")
	require.Contains(t, trust, `"token.actions.githubusercontent.com:aud":"sts.amazonaws.com"`)
	for _, repo := range []string{"octo-org/app", "octo-org/infra"} {
		require.Contains(t, trust, fmt.Sprintf(`"repo:%s:*"`, repo))
	}
	only(t, "AWS::IAM::OIDCProvider")
}

// TestOnlyTheInstanceHearsItsDoorbell: no role but the instance role may receive or delete a
// message of a doorbell (what rings an instance may carry what only it should read): every
// other statement that allows sqs:ReceiveMessage or sqs:DeleteMessage names queues that are not
// the stack's doorbells, and no wildcard that would cover them.
func TestOnlyTheInstanceHearsItsDoorbell(t *testing.T) {
	checked := 0
	for roles, ss := range statements(t) {
		if strings.Contains(roles, `"InstanceRole`) {
			continue
		}
		for _, s := range ss {
			acts := actions(s)
			if !slices.Contains(acts, "sqs:ReceiveMessage") && !slices.Contains(acts, "sqs:DeleteMessage") {
				continue
			}
			checked++
			res := js(s["Resource"])
			require.NotContains(t, res, "_bell_", "%s may receive from doorbells: %s", roles, js(s))
			require.NotEqual(t, `"*"`, res, "%s may receive from any queue: %s", roles, js(s))
			require.NotRegexp(t, `:\*"|hangar\*`, res, "%s: a queue wildcard that covers the doorbells: %s", roles, js(s))
		}
	}
	require.Positive(t, checked, "the workflow role receives from the pool queues: the check saw it")
}

// launchWildcards are the launch resources any of which a launch may make or use: what it makes
// (the fleet, instance, volumes, interfaces, spot requests) and the subnets a fleet's overrides
// name. Templates, images and security groups are named one by one.
var launchWildcards = []string{":fleet/*", ":instance/*", ":volume/*", ":network-interface/*", ":subnet/*", ":spot-instances-request/*"}

// TestLaunchesOnlyFromTemplates: for every role that launches, every statement that allows
// ec2:CreateFleet or ec2:RunInstances allows only the stack's launch templates, instances only
// from them and tagged as the stack's, the pools' images and security groups and no others; a
// RunInstances only when EC2 Fleet makes it on the role's behalf (a direct one could replace the
// template's user data); iam:PassRole only of the instance role, only to EC2.
func TestLaunchesOnlyFromTemplates(t *testing.T) {
	templateID := ""
	for id := range resources("AWS::EC2::LaunchTemplate") {
		templateID = id
	}
	sgID := ""
	for id := range resources("AWS::EC2::SecurityGroup") {
		sgID = id
	}
	for _, role := range []string{"WorkflowRole", "RefreshRole"} {
		var launch, instances, images, groups int
		for _, s := range policyOf(t, role) {
			acts := actions(s)
			if !slices.Contains(acts, "ec2:CreateFleet") && !slices.Contains(acts, "ec2:RunInstances") {
				continue
			}
			launch++
			cond := js(s["Condition"])
			if slices.Contains(acts, "ec2:RunInstances") {
				require.Contains(t, cond, `"Bool":{"aws:ViaAWSService":"true"}`, "%s: a RunInstances not made by EC2 Fleet: %s", role, js(s))
			}
			rs, ok := s["Resource"].([]any)
			if !ok {
				rs = []any{s["Resource"]}
			}
			for _, r := range rs {
				res := js(r)
				require.NotEqual(t, `"*"`, res, "%s: %s", role, js(s))
				switch {
				case strings.Contains(res, ":launch-template/"):
					require.Contains(t, res, `{"Ref":"`+templateID+`"}`, "%s: only the stack's templates: %s", role, res)
				case strings.Contains(res, ":image/"):
					images++
					require.Contains(t, res, `{"Ref":"Poollinuxx64Image"}`, "%s: only the pools' images: %s", role, res)
				case strings.Contains(res, ":security-group/"):
					groups++
					require.Contains(t, res, `{"Fn::GetAtt":["`+sgID+`","GroupId"]}`, "%s: only the pools' security groups: %s", role, res)
				case strings.Contains(res, ":instance/*"):
					instances++
					require.Contains(t, cond, `"ArnLike":{"ec2:LaunchTemplate":[`, "%s: an instance not from the stack's templates: %s", role, js(s))
					require.Contains(t, cond, `{"Ref":"`+templateID+`"}`, role)
					require.Contains(t, cond, `"aws:RequestTag/hangar:stack":"hangar"`, role)
				default:
					require.True(t, slices.ContainsFunc(launchWildcards, func(w string) bool { return strings.HasSuffix(strings.Trim(res, `"]}`), w) }),
						"%s: a launch resource not accounted for: %s", role, res)
				}
			}
		}
		require.NotZero(t, launch, role)
		require.Equal(t, 2, instances, "%s: CreateFleet and RunInstances of instances", role)
		require.Equal(t, 2, images, role)
		require.Equal(t, 2, groups, role)
	}

	var passes int
	for roles, ss := range statements(t) {
		for _, s := range ss {
			if !slices.Contains(actions(s), "iam:PassRole") {
				continue
			}
			passes++
			require.Equal(t, []string{"iam:PassRole"}, actions(s), roles)
			var instanceRole string
			for id := range resources("AWS::IAM::Role") {
				if strings.HasPrefix(id, "InstanceRole") {
					instanceRole = id
				}
			}
			require.JSONEq(t, `{"Fn::GetAtt":["`+instanceRole+`","Arn"]}`, js(s["Resource"]), "%s: passes another role than the instance role", roles)
			require.JSONEq(t, `{"StringEquals":{"iam:PassedToService":"ec2.amazonaws.com"}}`, js(s["Condition"]), roles)
		}
	}
	require.Equal(t, 2, passes, "the workflow role and refresh pass the instance role, no one else passes any")
}

func TestRefreshRole(t *testing.T) {
	all := js(policyOf(t, "RefreshRole"))
	require.Contains(t, all, `"ec2:StopInstances"`)
	require.NotContains(t, all, "kms:", "refresh handles no tokens")
	require.Contains(t, all, `"sqs:ListQueues"`, "the doorbell sweep")
	require.Contains(t, all, `"sqs:DeleteQueue"`)
	require.Contains(t, all, `"aws:RequestTag/hangar:instance-arn":"false"`, "doorbells are made only tagged with their instance")
}

// TestControllersReadPrices: the roles that launch instances may read the spot price history
// and the Price List (to record each launch's price), in a statement of its own, read-only; the
// instance role may not.
func TestControllersReadPrices(t *testing.T) {
	for _, role := range []string{"WorkflowRole", "RefreshRole"} {
		var found []string
		for _, s := range policyOf(t, role) {
			if slices.Contains(actions(s), "pricing:GetProducts") {
				found = actions(s)
			}
		}
		require.ElementsMatch(t, []string{"ec2:DescribeSpotPriceHistory", "pricing:GetProducts"}, found, role)
	}
	all := js(policyOf(t, "InstanceRole"))
	require.NotContains(t, all, "pricing:")
	require.NotContains(t, all, "DescribeSpotPriceHistory")
}
