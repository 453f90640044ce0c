package stack_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/infra/config"
	"github.com/hangar-ci/hangar/infra/stack"
	"github.com/hangar-ci/hangar/internal/wire/jobswire"
	jobmsg "github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// jobsConfig serves label-routed jobs: two pools with jobs (repository and organisation
// scope), one without; batches of 20 gathered for 1 s.
const jobsConfig = "../testdata/hangar.jobs.yaml"

// jobResources returns the jobs template's resources of a type.
func jobResources(typ string) map[string]map[string]any { return resourcesIn(jobsTemplate, typ) }

// onlyIn returns the id and properties of tpl's one resource of a type.
func onlyIn(t *testing.T, tpl map[string]any, typ string) (string, map[string]any) {
	t.Helper()
	rs := resourcesIn(tpl, typ)
	require.Len(t, rs, 1, typ)
	for id, p := range rs {
		return id, p
	}
	return "", nil
}

// idOf returns the logical id of tpl's resource of a type whose property key is value.
func idOf(t *testing.T, tpl map[string]any, typ, key, value string) string {
	t.Helper()
	for id, p := range resourcesIn(tpl, typ) {
		if p[key] == value {
			return id
		}
	}
	t.Fatalf("no %s with %s %s", typ, key, value)
	return ""
}

// grants returns every policy statement of tpl by the logical id of the role it applies to:
// the roles' inline policies, their default policies and the managed policies CDK moves
// statements to when a role's inline policies outgrow IAM's limit.
func grants(tpl map[string]any) map[string][]map[string]any {
	out := map[string][]map[string]any{}
	add := func(roles any, doc any) {
		for _, r := range asList(roles) {
			ref, _ := r.(map[string]any)["Ref"].(string)
			for _, s := range asList(doc.(map[string]any)["Statement"]) {
				out[ref] = append(out[ref], s.(map[string]any))
			}
		}
	}
	for _, typ := range []string{"AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"} {
		for _, p := range resourcesIn(tpl, typ) {
			add(p["Roles"], p["PolicyDocument"])
		}
	}
	for id, r := range resourcesIn(tpl, "AWS::IAM::Role") {
		for _, p := range asList(r["Policies"]) {
			add([]any{map[string]any{"Ref": id}}, p.(map[string]any)["PolicyDocument"])
		}
		if _, ok := out[id]; !ok {
			out[id] = nil
		}
	}
	return out
}

func asList(v any) []any {
	switch x := v.(type) {
	case nil:
		return nil
	case []any:
		return x
	}
	return []any{v}
}

// roleID returns the logical id of tpl's role whose id starts with prefix.
func roleID(t *testing.T, tpl map[string]any, prefix string) string {
	t.Helper()
	for id := range resourcesIn(tpl, "AWS::IAM::Role") {
		if strings.HasPrefix(id, prefix) {
			return id
		}
	}
	t.Fatalf("no role %s", prefix)
	return ""
}

// allows returns the statements of ss that allow action (named, or by a wildcard).
func allows(ss []map[string]any, action string) []map[string]any {
	return matching(ss, "Allow", action)
}

// denies returns the statements of ss that deny action (named, or by a wildcard).
func denies(ss []map[string]any, action string) []map[string]any {
	return matching(ss, "Deny", action)
}

func matching(ss []map[string]any, effect, action string) []map[string]any {
	var out []map[string]any
	for _, s := range ss {
		if e, _ := s["Effect"].(string); e != effect {
			continue
		}
		for _, a := range actions(s) {
			service, _, _ := strings.Cut(action, ":")
			if a == action || a == "*" || a == service+":*" {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// TestJobsFunctionURL: the webhook function is behind a Function URL without AWS authentication
// (the signature is the gate), with bounded concurrency, in the ingress role.
func TestJobsFunctionURL(t *testing.T) {
	url := jobResources("AWS::Lambda::Url")
	require.Len(t, url, 1)
	webhookID := idOf(t, jobsTemplate, "AWS::Lambda::Function", "FunctionName", "hangar-jobs-webhook")
	for _, u := range url {
		require.Equal(t, "NONE", u["AuthType"])
		require.JSONEq(t, `{"Fn::GetAtt":["`+webhookID+`","Arn"]}`, js(u["TargetFunctionArn"]), "the webhook function's URL")
	}
	fn := jobResources("AWS::Lambda::Function")[webhookID]
	require.Equal(t, "provided.al2023", fn["Runtime"])
	require.Equal(t, []any{"arm64"}, fn["Architectures"])
	require.EqualValues(t, 10, fn["Timeout"])
	require.EqualValues(t, 256, fn["MemorySize"])
	require.EqualValues(t, 20, fn["ReservedConcurrentExecutions"], "the URL is public: its cost is bounded")
	vars := fn["Environment"].(map[string]any)["Variables"].(map[string]any)
	require.Equal(t, jobswire.RoleIngress, vars[jobswire.EnvRole])
	require.Equal(t, "hangar-jobs", vars[jobswire.EnvStack])
	require.Contains(t, js(vars[jobswire.EnvWebhookSecretARN]), `"Ref":"WebhookSecret"`)
	require.Contains(t, js(vars[jobswire.EnvJobsQueueURL]), `"Ref":"JobsQueue`)
	require.NotContains(t, vars, jobswire.EnvAppSecretARN, "the webhook function is not told where the App's key is")
	perms := js(jobResources("AWS::Lambda::Permission"))
	require.Contains(t, perms, `"FunctionUrlAuthType":"NONE"`)
}

// TestJobsDispatchFunction: the dispatcher's settings and environment.
func TestJobsDispatchFunction(t *testing.T) {
	id := idOf(t, jobsTemplate, "AWS::Lambda::Function", "FunctionName", "hangar-jobs-dispatch")
	fn := jobResources("AWS::Lambda::Function")[id]
	require.Equal(t, "provided.al2023", fn["Runtime"])
	require.Equal(t, []any{"arm64"}, fn["Architectures"])
	require.EqualValues(t, 120, fn["Timeout"])
	require.EqualValues(t, 512, fn["MemorySize"])
	require.EqualValues(t, 14, fn["ReservedConcurrentExecutions"])
	vars := fn["Environment"].(map[string]any)["Variables"].(map[string]any)
	require.Equal(t, jobswire.RoleDispatch, vars[jobswire.EnvRole])
	require.Equal(t, "https://api.github.com", vars[jobswire.EnvGitHubAPIURL])
	require.Contains(t, js(vars[jobswire.EnvAppSecretARN]), `"Ref":"GitHubAppSecret"`)
	require.Contains(t, js(vars[jobswire.EnvReturnsQueueARN]), `"ReturnsQueue`)
	require.Contains(t, js(vars[jobswire.EnvJobsQueueURL]), `"Ref":"JobsQueue`)
	require.NotContains(t, vars, jobswire.EnvWebhookSecretARN)
	require.Len(t, jobResources("AWS::Lambda::Function"), 4, "the refresh functions, the webhook function, the dispatcher")
	require.Len(t, jobResources("AWS::Logs::LogGroup"), 4, "each its own log group")
}

// TestJobsQueues: the jobs queue and the returns queue, encrypted, each with its dead-letter
// queue; the jobs dead-letter queue has its alarm.
func TestJobsQueues(t *testing.T) {
	queues := jobResources("AWS::SQS::Queue")
	for id, q := range queues {
		require.Equal(t, true, q["SqsManagedSseEnabled"], id)
	}
	byName := map[string]string{}
	for id, q := range queues {
		byName[q["QueueName"].(string)] = id
	}
	for _, tc := range []struct {
		name        string
		maxReceives float64
	}{{"hangar-jobs-jobs", 10}, {"hangar-jobs-returns", 5}} {
		q := queues[byName[tc.name]]
		require.NotNil(t, q, tc.name)
		require.EqualValues(t, 120, q["VisibilityTimeout"], "%s: not shorter than the dispatcher's timeout", tc.name)
		require.EqualValues(t, 86400, q["MessageRetentionPeriod"], tc.name)
		dlq := byName[tc.name+"-dlq"]
		require.NotEmpty(t, dlq, tc.name)
		require.EqualValues(t, 14*86400, queues[dlq]["MessageRetentionPeriod"], tc.name)
		require.JSONEq(t, `{"deadLetterTargetArn":{"Fn::GetAtt":["`+dlq+`","Arn"]},"maxReceiveCount":`+js(tc.maxReceives)+`}`, js(q["RedrivePolicy"]), tc.name)
	}
	var alarm map[string]any
	for _, a := range jobResources("AWS::CloudWatch::Alarm") {
		if a["AlarmName"] == "hangar-jobs-jobs-dead-letters" {
			alarm = a
		}
	}
	require.NotNil(t, alarm, "the jobs dead-letter queue's alarm")
	require.Equal(t, "ApproximateNumberOfMessagesVisible", alarm["MetricName"])
	require.Equal(t, "AWS/SQS", alarm["Namespace"])
	require.Equal(t, "GreaterThanThreshold", alarm["ComparisonOperator"])
	require.EqualValues(t, 0, alarm["Threshold"])
	require.Contains(t, js(alarm["Dimensions"]), `"Fn::GetAtt":["`+byName["hangar-jobs-jobs-dlq"]+`","QueueName"]`)
}

// TestAlarmsNotify: every alarm tells the alarm topic when it fires and when it clears: the
// stack's own topic, or the config's existing one, to which the config's emails are subscribed;
// label-routed jobs add alarms on failed and unrouted jobs and on refused deliveries over a rate.
func TestAlarmsNotify(t *testing.T) {
	own := idOf(t, template, "AWS::SNS::Topic", "TopicName", "hangar-alarms")
	require.Empty(t, resourcesIn(template, "AWS::SNS::Subscription"), "no emails in the example")
	existing := "arn:aws:sns:us-east-1:123456789012:ci-alarms"
	require.Empty(t, resourcesIn(jobsTemplate, "AWS::SNS::Topic"), "the existing topic is used, none made")
	for _, tc := range []struct {
		tpl   map[string]any
		topic string
	}{{template, `[{"Ref":"` + own + `"}]`}, {jobsTemplate, `["` + existing + `"]`}} {
		alarms := resourcesIn(tc.tpl, "AWS::CloudWatch::Alarm")
		require.NotEmpty(t, alarms)
		for id, a := range alarms {
			require.JSONEq(t, tc.topic, js(a["AlarmActions"]), id)
			require.JSONEq(t, tc.topic, js(a["OKActions"]), id)
		}
	}
	subs := resourcesIn(jobsTemplate, "AWS::SNS::Subscription")
	require.Len(t, subs, 1)
	for _, s := range subs {
		require.Equal(t, "email", s["Protocol"])
		require.Equal(t, "ci-oncall@example.com", s["Endpoint"])
		require.Equal(t, existing, s["TopicArn"])
	}
	named := map[string]map[string]any{}
	for _, a := range resourcesIn(jobsTemplate, "AWS::CloudWatch::Alarm") {
		if n, ok := a["AlarmName"].(string); ok {
			named[n] = a
		}
	}
	unrouted := named["hangar-jobs-jobs-unrouted"]
	require.NotNil(t, unrouted)
	require.EqualValues(t, 0, unrouted["Threshold"])
	require.Contains(t, js(unrouted["Metrics"]), `"Reason","Value":"ambiguous"`)
	require.NotContains(t, js(unrouted["Metrics"]), `"Value":"pools"`, "a stack-side failure is a webhook error")
	refused := named["hangar-jobs-webhooks-refused"]
	require.NotNil(t, refused)
	require.EqualValues(t, 10, refused["Threshold"])
	for _, r := range []string{"signature", "repository", "installation"} {
		require.Contains(t, js(refused["Metrics"]), `"Reason","Value":"`+r+`"`)
	}
	webhookErrors := named["hangar-jobs-webhook-errors"]
	require.NotNil(t, webhookErrors)
	for _, r := range []string{"secret", "pools", "record", "queue"} {
		require.Contains(t, js(webhookErrors["Metrics"]), `"Reason","Value":"`+r+`"`)
	}
	for name, metric := range map[string]string{"hangar-jobs-app-errors": "AppErrors", "hangar-jobs-sweep-errors": "SweepErrors"} {
		a := named[name]
		require.NotNil(t, a, name)
		require.Equal(t, metric, a["MetricName"])
		require.JSONEq(t, `[{"Name":"Stack","Value":"hangar-jobs"}]`, js(a["Dimensions"]))
	}
	failed := 0
	for _, a := range resourcesIn(jobsTemplate, "AWS::CloudWatch::Alarm") {
		if a["MetricName"] == "JobsFailed" {
			failed++
		}
	}
	require.Equal(t, 2, failed, "one per pool serving label-routed jobs")
}

// TestJobsSweepSchedule: every five minutes, the schedule puts the sweep message on the jobs
// queue, which lets EventBridge send to it for that rule alone; the dispatcher is told the period.
func TestJobsSweepSchedule(t *testing.T) {
	var rule map[string]any
	for _, r := range jobResources("AWS::Events::Rule") {
		if strings.Contains(js(r["Targets"]), `"JobsQueue`) {
			require.Nil(t, rule, "one rule sends to the jobs queue")
			rule = r
		}
	}
	require.NotNil(t, rule)
	require.Equal(t, "rate(5 minutes)", rule["ScheduleExpression"])
	targets := asList(rule["Targets"])
	require.Len(t, targets, 1)
	target := targets[0].(map[string]any)
	msg, err := jobmsg.Parse(target["Input"].(string))
	require.NoError(t, err, "the message the dispatcher reads")
	require.Equal(t, jobmsg.KindSweep, msg.Kind)
	require.Contains(t, js(target["Arn"]), `"JobsQueue`)
	var sends []map[string]any
	for _, policy := range jobResources("AWS::SQS::QueuePolicy") {
		for _, s := range asList(policy["PolicyDocument"].(map[string]any)["Statement"]) {
			if st := s.(map[string]any); st["Effect"] == "Allow" {
				require.Contains(t, js(policy["Queues"]), `"Ref":"JobsQueue`, "only the jobs queue grants anything")
				sends = append(sends, st)
			}
		}
	}
	require.Len(t, sends, 1, "the one grant of the queues' resource policies")
	require.Contains(t, js(sends[0]["Action"]), `"sqs:SendMessage"`)
	require.Equal(t, `{"Service":"events.amazonaws.com"}`, js(sends[0]["Principal"]))
	require.Contains(t, js(sends[0]["Condition"]), `"aws:SourceArn"`, "for the sweep rule alone")
	id := idOf(t, jobsTemplate, "AWS::Lambda::Function", "FunctionName", "hangar-jobs-dispatch")
	vars := jobResources("AWS::Lambda::Function")[id]["Environment"].(map[string]any)["Variables"].(map[string]any)
	require.Equal(t, "5m0s", vars[jobswire.EnvSweepEvery])
}

// TestJobsEventSources: the dispatcher is fed by the jobs queue (the config's batching) and the
// returns queue, with partial batch responses, within its reserved concurrency, once its role may
// read them.
func TestJobsEventSources(t *testing.T) {
	dispatch := idOf(t, jobsTemplate, "AWS::Lambda::Function", "FunctionName", "hangar-jobs-dispatch")
	role := roleID(t, jobsTemplate, "DispatchRole")
	sources := map[string]map[string]any{}
	for id, r := range jobsTemplate["Resources"].(map[string]any) {
		r := r.(map[string]any)
		if r["Type"] != "AWS::Lambda::EventSourceMapping" {
			continue
		}
		props := r["Properties"].(map[string]any)
		require.JSONEq(t, `{"Ref":"`+dispatch+`"}`, js(props["FunctionName"]), id)
		require.Equal(t, []any{"ReportBatchItemFailures"}, props["FunctionResponseTypes"], id)
		require.Contains(t, js(r["DependsOn"]), `"`+role+`"`, "%s: after the role's policy", id)
		queue := js(props["EventSourceArn"])
		sources[queue[strings.Index(queue, `["`)+2:strings.Index(queue, `",`)]] = props
	}
	require.Len(t, sources, 2)
	var total float64
	for q, props := range sources {
		switch {
		case strings.HasPrefix(q, "JobsQueue"):
			require.EqualValues(t, 20, props["BatchSize"], "app.batchSize")
			require.EqualValues(t, 1, props["MaximumBatchingWindowInSeconds"], "app.batchWindow")
		case strings.HasPrefix(q, "ReturnsQueue"):
			require.EqualValues(t, 10, props["BatchSize"])
		default:
			t.Fatalf("an event source of %s", q)
		}
		total += props["ScalingConfig"].(map[string]any)["MaximumConcurrency"].(float64)
	}
	require.LessOrEqual(t, total, float64(14), "the mappings never invoke beyond the dispatcher's reserved concurrency")
}

// TestJobsSecrets: the App's secret is created empty and the webhook secret generated; the App's
// secret is readable by the dispatcher's role and by no other role of the template, the webhook
// secret by the webhook function's alone; the workflow, refresh and instance roles have no
// Secrets Manager action at all.
func TestJobsSecrets(t *testing.T) {
	secrets := jobResources("AWS::SecretsManager::Secret")
	require.Len(t, secrets, 2)
	app, webhook := secrets["GitHubAppSecret"], secrets["WebhookSecret"]
	require.Equal(t, "hangar-jobs-github-app", app["Name"])
	require.NotContains(t, app, "SecretString", "empty: the user puts the App's key in")
	require.NotContains(t, app, "GenerateSecretString")
	require.Equal(t, "hangar-jobs-webhook-secret", webhook["Name"])
	require.JSONEq(t, `{"PasswordLength":40,"ExcludePunctuation":true,"IncludeSpace":false}`, js(webhook["GenerateSecretString"]),
		"generated: letters and digits, to be pasted into the App")
	require.Empty(t, jobResources("AWS::SecretsManager::ResourcePolicy"))

	readers := map[string][]string{} // secret logical id (or * for any) -> roles that may read it
	for role, ss := range grants(jobsTemplate) {
		for _, s := range ss {
			var secretActions []string
			for _, a := range actions(s) {
				if strings.HasPrefix(a, "secretsmanager:") || a == "*" {
					secretActions = append(secretActions, a)
				}
			}
			if len(secretActions) == 0 {
				continue
			}
			require.Equal(t, []string{"secretsmanager:GetSecretValue"}, secretActions, "%s: %s", role, js(s))
			for _, r := range asList(s["Resource"]) {
				ref, _ := r.(map[string]any)["Ref"].(string)
				if ref == "" {
					ref = "*" // anything but the one secret counts as any secret
				}
				readers[ref] = append(readers[ref], role)
			}
		}
	}
	require.Equal(t, map[string][]string{
		"GitHubAppSecret": {roleID(t, jobsTemplate, "DispatchRole")},
		"WebhookSecret":   {roleID(t, jobsTemplate, "WebhookRole")},
	}, readers)
	all := grants(jobsTemplate)
	for _, prefix := range []string{"WorkflowRole", "RefreshRole", "InstanceRole"} {
		require.NotContains(t, js(all[roleID(t, jobsTemplate, prefix)]), "secretsmanager:", "%s can do nothing with Secrets Manager", prefix)
	}
}

// TestJobsInstanceRole: an instance may send to the returns queue, and gains nothing else.
func TestJobsInstanceRole(t *testing.T) {
	ss := grants(jobsTemplate)[roleID(t, jobsTemplate, "InstanceRole")]
	returns := idOf(t, jobsTemplate, "AWS::SQS::Queue", "QueueName", "hangar-jobs-returns")
	var toReturns []map[string]any
	for _, s := range ss {
		if strings.Contains(js(s["Resource"]), returns) {
			toReturns = append(toReturns, s)
		}
	}
	require.Len(t, toReturns, 1)
	require.Equal(t, []string{"sqs:SendMessage"}, actions(toReturns[0]))
	require.JSONEq(t, `{"Fn::GetAtt":["`+returns+`","Arn"]}`, js(toReturns[0]["Resource"]), "the returns queue alone")
	require.Len(t, ss, len(policyOf(t, "InstanceRole"))+1, "one statement more than without label-routed jobs")
	all := js(ss)
	for _, id := range []string{"JobsQueue", "JobsDeadLetters", "ReturnsDeadLetters", "GitHubAppSecret", "WebhookSecret"} {
		require.NotContains(t, all, `"`+id, "the instance role reaches nothing of %s", id)
	}
}

// TestJobsNoWildcardAction: no statement of any role of the jobs template has a wildcard action,
// and the two new roles none but their own.
func TestJobsNoWildcardAction(t *testing.T) {
	for role, ss := range grants(jobsTemplate) {
		for _, s := range ss {
			for _, a := range actions(s) {
				require.NotContains(t, a, "*", "%s: %s", role, js(s))
			}
		}
	}
	for id, r := range jobResources("AWS::IAM::Role") {
		require.Empty(t, r["ManagedPolicyArns"], "%s: every statement is the stack's own", id)
	}
}

// TestJobsIngressRole: the webhook function reads its secret and the pool documents, records
// and forgets webhook/... items only, and sends to the jobs queue: nothing else.
func TestJobsIngressRole(t *testing.T) {
	ss := grants(jobsTemplate)[roleID(t, jobsTemplate, "WebhookRole")]
	var acts []string
	for _, s := range ss {
		acts = append(acts, actions(s)...)
	}
	require.ElementsMatch(t, []string{"logs:CreateLogStream", "logs:PutLogEvents", "secretsmanager:GetSecretValue",
		"ssm:GetParametersByPath", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "sqs:SendMessage"}, acts)
	table := idOf(t, jobsTemplate, "AWS::DynamoDB::Table", "TableName", "hangar-jobs-instances")
	for _, s := range allows(ss, "dynamodb:UpdateItem") {
		require.JSONEq(t, `{"Fn::GetAtt":["`+table+`","Arn"]}`, js(s["Resource"]), "the table, not its indexes")
		require.JSONEq(t, `{"ForAllValues:StringLike":{"dynamodb:LeadingKeys":["webhook/*"]}}`, js(s["Condition"]), "webhook items only")
	}
	jobs := idOf(t, jobsTemplate, "AWS::SQS::Queue", "QueueName", "hangar-jobs-jobs")
	for _, s := range allows(ss, "sqs:SendMessage") {
		require.JSONEq(t, `{"Fn::GetAtt":["`+jobs+`","Arn"]}`, js(s["Resource"]), "the jobs queue alone")
	}
	for _, s := range allows(ss, "ssm:GetParametersByPath") {
		require.Contains(t, js(s["Resource"]), ":parameter/hangar/hangar-jobs/pools")
		require.NotContains(t, js(s["Resource"]), `"*"`)
	}
}

// TestLabelRecordsOutOfReach: the workflow and refresh roles may read or write no item keyed
// webhook/…: every DynamoDB item action on them is denied, whatever else allows.
func TestLabelRecordsOutOfReach(t *testing.T) {
	all := grants(jobsTemplate)
	table := idOf(t, jobsTemplate, "AWS::DynamoDB::Table", "TableName", "hangar-jobs-instances")
	for _, role := range []string{"WorkflowRole", "RefreshRole"} {
		ss := all[roleID(t, jobsTemplate, role)]
		for _, action := range []string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:UpdateItem",
			"dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "dynamodb:PartiQLUpdate"} {
			d := denies(ss, action)
			require.Len(t, d, 1, "%s: %s of webhook items is denied", role, action)
			require.JSONEq(t, `{"Fn::GetAtt":["`+table+`","Arn"]}`, js(d[0]["Resource"]), role)
			require.JSONEq(t, `{"ForAnyValue:StringLike":{"dynamodb:LeadingKeys":["webhook/*"]}}`, js(d[0]["Condition"]), role)
		}
	}
	require.Empty(t, denies(all[roleID(t, jobsTemplate, "DispatchRole")], "dynamodb:BatchGetItem"), "the dispatcher reads the records")
}

// TestJobsDispatchRole: the dispatcher holds the same control-plane statements as the workflow
// role (claims, launches from the stack's templates, doorbells and the hand-overs they carry,
// starting and terminating the stack's instances), the App's secret, and what the event source
// mappings need of its two queues; it uses no KMS key and invokes no function.
func TestJobsDispatchRole(t *testing.T) {
	all := grants(jobsTemplate)
	dispatch := all[roleID(t, jobsTemplate, "DispatchRole")]
	have := map[string]bool{}
	for _, s := range dispatch {
		have[js(s)] = true
	}
	for _, s := range all[roleID(t, jobsTemplate, "WorkflowRole")] {
		if slices.Contains(actions(s), "lambda:InvokeFunction") {
			continue // refresh by hand is the workflows' alone
		}
		if s["Effect"] == "Deny" {
			continue // the label door's records, which the dispatcher reads
		}
		require.True(t, have[js(s)], "the dispatcher lacks the workflow role's %s", js(s))
	}
	text := js(dispatch)
	require.NotContains(t, text, "kms:")
	require.NotContains(t, text, "lambda:")
	require.NotContains(t, text, "ec2:StopInstances", "stopping is refresh's")
	for _, s := range allows(dispatch, "sqs:ReceiveMessage") {
		res := js(s["Resource"])
		if strings.Contains(res, "JobsQueue") || strings.Contains(res, "ReturnsQueue") {
			require.ElementsMatch(t, []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}, actions(s), "what an event source mapping needs")
		}
	}
	jobs := idOf(t, jobsTemplate, "AWS::SQS::Queue", "QueueName", "hangar-jobs-jobs")
	var checks bool
	for _, s := range allows(dispatch, "sqs:SendMessage") {
		checks = checks || js(s["Resource"]) == `{"Fn::GetAtt":["`+jobs+`","Arn"]}`
	}
	require.True(t, checks, "the dispatcher sends its checks to the jobs queue")
	deletes := allows(dispatch, "dynamodb:DeleteItem")
	require.Len(t, deletes, 1, "the dispatcher deletes the label door's own items (waiters, its records), and no instance's")
	require.JSONEq(t, `{"ForAllValues:StringLike":{"dynamodb:LeadingKeys":["webhook/*"]}}`, js(deletes[0]["Condition"]))
}

// TestJobsPoolDocuments: the documents of pools with jobs carry them with the stack label and
// installations, the jobs queue and its dead letters (hangar status), and the returns queue's
// URL; the other pool's carries neither; every document carries the trust set's repositories.
func TestJobsPoolDocuments(t *testing.T) {
	returns := idOf(t, jobsTemplate, "AWS::SQS::Queue", "QueueName", "hangar-jobs-returns")
	queue := idOf(t, jobsTemplate, "AWS::SQS::Queue", "QueueName", "hangar-jobs-jobs")
	dlq := idOf(t, jobsTemplate, "AWS::SQS::Queue", "QueueName", "hangar-jobs-jobs-dlq")
	queues := `,\"queueUrl\":\"",{"Ref":"` + queue + `"},"\",\"deadLetterQueueUrl\":\"",{"Ref":"` + dlq + `"},"\"}`
	docs := map[string]string{}
	for _, p := range jobResources("AWS::SSM::Parameter") {
		docs[p["Name"].(string)] = js(p["Value"])
	}
	for pool, want := range map[string]string{
		"linux-x64":   `\"jobs\":{\"stackLabel\":\"hangar\",\"labels\":[\"linux-x64\"],\"scope\":\"repository\",\"installations\":[11]` + queues,
		"linux-arm64": `\"jobs\":{\"stackLabel\":\"hangar\",\"labels\":[\"linux\",\"ARM64\"],\"scope\":\"organization\",\"installations\":[11]` + queues,
	} {
		doc := docs[pooldoc.ParameterName("hangar-jobs", pool)]
		require.Contains(t, doc, want, pool)
		require.Contains(t, doc, `\"returnsQueueUrl\":\"",{"Ref":"`+returns+`"}`, pool)
		require.Contains(t, doc, `\"allowedRepositories\":[\"octo-org/*\"]`, pool)
	}
	steps := docs[pooldoc.ParameterName("hangar-jobs", "steps-only")]
	require.NotEmpty(t, steps)
	require.Contains(t, steps, `\"allowedRepositories\":[\"octo-org/*\"]`)
	require.NotContains(t, steps, "jobs")
	require.NotContains(t, steps, "returnsQueueUrl")
}

// TestJobsOutputs: what setting up the App needs (docs/labels.md).
func TestJobsOutputs(t *testing.T) {
	outputs := jobsTemplate["Outputs"].(map[string]any)
	value := func(name string) string { return js(outputs[name].(map[string]any)["Value"]) }
	urlID, _ := onlyIn(t, jobsTemplate, "AWS::Lambda::Url")
	require.JSONEq(t, `{"Fn::GetAtt":["`+urlID+`","FunctionUrl"]}`, value("WebhookUrl"))
	require.JSONEq(t, `{"Ref":"GitHubAppSecret"}`, value("AppSecretArn"))
	require.JSONEq(t, `{"Ref":"WebhookSecret"}`, value("WebhookSecretArn"))
	require.Contains(t, value("JobsQueueUrl"), `{"Ref":"JobsQueue`)
	require.Contains(t, value("JobsDeadLetterQueueUrl"), `{"Ref":"JobsDeadLetters`)
}

// TestNoJobsNoJobResources: the example (no pool with jobs) has nothing of label-routed jobs.
func TestNoJobsNoJobResources(t *testing.T) {
	for _, typ := range []string{"AWS::Lambda::Url", "AWS::Lambda::EventSourceMapping", "AWS::SecretsManager::Secret", "AWS::IAM::ManagedPolicy"} {
		require.Empty(t, resources(typ), typ)
	}
	require.Len(t, resources("AWS::Lambda::Function"), 2)
	require.Len(t, resources("AWS::IAM::Role"), 3)
	text := js(template)
	for _, s := range []string{"returnsQueueUrl", "stackLabel", "-jobs", "-returns", "secretsmanager", "HANGAR_WEBHOOK_ROLE"} {
		require.NotContains(t, text, s)
	}
	for _, name := range []string{"WebhookUrl", "AppSecretArn", "WebhookSecretArn", "JobsQueueUrl", "JobsDeadLetterQueueUrl"} {
		require.NotContains(t, template["Outputs"], name)
	}
}

// TestJobsImportedSecretsAndEnterprise: secrets named in the config are used, not made; an
// enterprise server's API is <server>/api/v3.
func TestJobsImportedSecretsAndEnterprise(t *testing.T) {
	cfg, err := config.Load(jobsConfig)
	require.NoError(t, err)
	const appARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:ci/hangar-app-AbCdEf"
	const hookARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:ci/hangar-webhook-GhIjKl"
	cfg.App.AppSecretARN, cfg.App.WebhookSecretARN = appARN, hookARN
	cfg.GitHub.ServerURL = "https://ghe.example.com"
	require.NoError(t, cfg.Validate())
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
	st, err := stack.New(app, cfg, assets, nil)
	require.NoError(t, err)
	tpl := templateOf(st)
	require.Empty(t, resourcesIn(tpl, "AWS::SecretsManager::Secret"), "nothing made")
	dispatch := resourcesIn(tpl, "AWS::Lambda::Function")[idOf(t, tpl, "AWS::Lambda::Function", "FunctionName", "hangar-jobs-dispatch")]
	vars := dispatch["Environment"].(map[string]any)["Variables"].(map[string]any)
	require.Equal(t, appARN, vars[jobswire.EnvAppSecretARN])
	require.Equal(t, "https://ghe.example.com/api/v3", vars[jobswire.EnvGitHubAPIURL])
	all := grants(tpl)
	for role, want := range map[string]string{"DispatchRole": appARN, "WebhookRole": hookARN} {
		reads := allows(all[roleID(t, tpl, role)], "secretsmanager:GetSecretValue")
		require.Len(t, reads, 1, role)
		require.Equal(t, want, reads[0]["Resource"], role)
	}
	outputs := js(tpl["Outputs"])
	require.Contains(t, outputs, appARN)
	require.Contains(t, outputs, hookARN)
}

// TestJobsNeedWebhookBuild: a stack with jobs refuses to synthesize without the webhook build.
func TestJobsNeedWebhookBuild(t *testing.T) {
	cfg, err := config.Load(jobsConfig)
	require.NoError(t, err)
	a := assets
	a.WebhookDir = filepath.Join(t.TempDir(), "missing")
	_, err = stack.New(awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())}), cfg, a, nil)
	require.ErrorContains(t, err, "webhook function build (pools have jobs)")

	plain, err := config.Load("../hangar.example.yaml")
	require.NoError(t, err)
	_, err = stack.New(awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())}), plain, a, nil)
	require.NoError(t, err, "without jobs the webhook build is not needed")
}

// TestNoReservations: with lambda.reserveConcurrency false (an account whose quota cannot hold the
// reservations), no function reserves concurrency, and the event source mappings still bound
// the dispatcher's invocations.
func TestNoReservations(t *testing.T) {
	cfg, err := config.Load(jobsConfig)
	require.NoError(t, err)
	cfg.Lambda.ReserveConcurrency = jsii.Bool(false)
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
	st, err := stack.New(app, cfg, assets, nil)
	require.NoError(t, err)
	tpl := templateOf(st)
	fns := resourcesIn(tpl, "AWS::Lambda::Function")
	require.Len(t, fns, 4)
	for id, fn := range fns {
		require.NotContains(t, fn, "ReservedConcurrentExecutions", id)
	}
	for id, m := range resourcesIn(tpl, "AWS::Lambda::EventSourceMapping") {
		require.Contains(t, js(m), `"MaximumConcurrency"`, id)
	}
}
