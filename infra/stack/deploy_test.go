package stack_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/jsii-runtime-go"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/infra/config"
	"github.com/hangar-ci/hangar/infra/stack"
	"github.com/hangar-ci/hangar/internal/testkit/emustack"
	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
	"github.com/hangar-ci/hangar/internal/wire/jobswire"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/labels/webhook"
	"github.com/hangar-ci/hangar/pkg/refresh"
)

// emulatorConfig is the example config made to fit the emulator: a stack name of its own, the
// GitHub stand-in at server as the GitHub server (a local world build accepts its plain http),
// the emulator's default subnets, the local world's repository allowed, and a warm target of
// three hot instances for refresh to meet.
func emulatorConfig(ctx context.Context, t *testing.T, ec2c *ec2.Client, server string) *config.Config {
	t.Helper()
	c, err := config.Load("../hangar.example.yaml")
	require.NoError(t, err)
	c.Stack = testbed.Name(t, "hangar-deploy")
	c.GitHub.ServerURL = server
	c.GitHub.Repositories = append(c.GitHub.Repositories, localenv.Repo)
	p := &c.Pools[0]
	p.Subnets, err = localenv.DefaultSubnets(ctx, ec2c)
	require.NoError(t, err)
	p.VPCID, err = localenv.DefaultVPC(ctx, ec2c)
	require.NoError(t, err)
	p.AllowedRepositories = append(p.AllowedRepositories, localenv.Repo)
	p.Warm = pooldoc.Warm{Schedules: []pooldoc.Schedule{{Name: "always", Hot: 3}}}
	require.NoError(t, c.Validate())
	return c
}

// TestDeployIntoEmulators: the stack, synthesized with CDK's default synthesizer as for an
// account and its assets uploaded, deploys into the emulator's CloudFormation; then the steps
// and refresh, given only the stack's name, run a whole cycle on what it made.
func TestDeployIntoEmulators(t *testing.T) {
	testbed.Require(t)
	ctx := testbed.Context(t, 10*time.Minute)
	cfg := testbed.AWSConfig(t)
	ec2c := ec2.NewFromConfig(cfg)
	gh := ghfake.New(localenv.AdminToken) // up before the stack: its pool documents pin its URL
	t.Cleanup(gh.Close)
	c := emulatorConfig(ctx, t, ec2c, gh.URL())

	out := t.TempDir()
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(out)})
	_, err := stack.New(app, c, assets, nil)
	require.NoError(t, err)
	app.Synth(nil)

	d, err := emustack.Deploy(ctx, cfg, out, c.Stack, emustack.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emustack.Delete(context.Background(), cfg, c.Stack) })
	for _, g := range d.Gaps {
		t.Logf("emulator gap: %s", g)
	}
	require.Contains(t, d.Outputs, "WorkflowRoleArn")
	res, err := cloudformation.NewFromConfig(cfg).ListStackResources(ctx, &cloudformation.ListStackResourcesInput{StackName: aws.String(c.Stack)})
	require.NoError(t, err)
	var types []string
	var functions []string // the refresh functions' physical names
	for _, r := range res.StackResourceSummaries {
		types = append(types, aws.ToString(r.ResourceType))
		if aws.ToString(r.ResourceType) == "AWS::Lambda::Function" {
			functions = append(functions, aws.ToString(r.PhysicalResourceId))
		}
	}
	for _, want := range []string{"AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::EC2::LaunchTemplate", "AWS::SSM::Parameter",
		"AWS::Lambda::Function", "AWS::Events::Rule", "AWS::IAM::Role", "AWS::IAM::InstanceProfile", "AWS::EC2::SecurityGroup"} {
		require.Contains(t, types, want, "created")
	}
	function := pooldoc.RefreshFunction(c.Stack)
	require.ElementsMatch(t, []string{function, pooldoc.RefreshEventsFunction(c.Stack)}, functions,
		"the refresh function and the events function are among the stack's resources")

	// The world around the stack (GitHub stand-in, fleet simulator), attached to it by name.
	e, err := localenv.Start(ctx, localenv.Options{Stack: c.Stack, Pool: c.Pools[0].Name, Deployed: true, Baked: true, GitHub: gh})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	require.Equal(t, d.Outputs["TableName"], e.Table, "the pool document names the stack's table")
	lt, err := ec2c.DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{LaunchTemplateIds: []string{e.Doc.LaunchTemplate.ID}})
	require.NoError(t, err)
	require.Len(t, lt.LaunchTemplates, 1, "the pool document names the stack's launch template")
	image, err := ssm.NewFromConfig(cfg).GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(c.Pools[0].Image.SSMParameter)})
	require.NoError(t, err)

	provision := testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/provision")
	release := testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/release")
	dir := t.TempDir()
	var first []string
	for i, run := range []string{"7001", "7002"} {
		p, err := localenv.RunStep(ctx, provision, e.StepEnv(run, 2, dir), dir)
		require.NoError(t, err)
		var ids []string
		require.NoError(t, json.Unmarshal([]byte(p.Outputs["instance-ids"]), &ids))
		require.Len(t, ids, 2)
		if i == 0 {
			require.Equal(t, "2", p.Outputs["created"], "cold: launched from the stack's template")
			first = ids
			insts, err := ec2c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
			require.NoError(t, err)
			for _, r := range insts.Reservations {
				for _, in := range r.Instances {
					require.Equal(t, aws.ToString(image.Parameter.Value), aws.ToString(in.ImageId), "the image the stack's parameter names")
				}
			}
		} else {
			require.Equal(t, "2", p.Outputs["reused"], "warm: the first run's instances, back in the stack's queue")
			require.ElementsMatch(t, first, ids)
		}
		jobs := []int64{e.GH.QueueJob(localenv.Repo, []string{run}, "echo one"), e.GH.QueueJob(localenv.Repo, []string{run}, "echo two")}
		for _, j := range jobs {
			job, err := e.GH.WaitJob(ctx, j)
			require.NoError(t, err)
			require.Equal(t, "success", job.Conclusion)
		}
		_, err = localenv.RunStep(ctx, release, e.StepEnv(run, 0, dir), dir)
		require.NoError(t, err)
		idle, err := e.Store.InPoolState(ctx, e.Pool, state.Idle)
		require.NoError(t, err)
		require.Len(t, idle, 2, "both back in the pool")
		require.Empty(t, e.GH.Runners(""), "no runner left registered")
	}

	// Refresh, configured as the stack configures its function, meets the warm target.
	fn, err := lambda.NewFromConfig(cfg).GetFunctionConfiguration(ctx, &lambda.GetFunctionConfigurationInput{FunctionName: aws.String(function)})
	require.NoError(t, err)
	stackName := fn.Environment.Variables["HANGAR_STACK"]
	require.Equal(t, c.Stack, stackName)
	cmd := exec.CommandContext(ctx, testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/refresh"), "--once", "--stack", stackName)
	cmd.Env = e.Environ()
	b, err := cmd.Output()
	require.NoError(t, err)
	var rep refresh.Report
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Len(t, rep.Pools, 1)
	require.Equal(t, 2, rep.Pools[0].Idle, "refresh counts the idle instances: %s", b)
	require.Equal(t, 1, rep.Pools[0].Launched, "and launches the third hot one: %s", b)
	warming, err := e.Store.InPoolState(ctx, e.Pool, state.Created)
	require.NoError(t, err)
	require.Len(t, warming, 1)
	require.NotContains(t, first, warming[0].ID)
	_, err = e.WaitSignal(ctx, warming[0].ID, state.SignalReady, "", 1)
	require.NoError(t, err, "its agent comes up")
}

// jobsEmulatorConfig is testdata/hangar.jobs.yaml made to fit the emulator: a stack name of its
// own, the emulator's default subnets and VPC (each pool gets its own security group), and one of
// the emulator's images.
func jobsEmulatorConfig(ctx context.Context, t *testing.T, ec2c *ec2.Client) *config.Config {
	t.Helper()
	c, err := config.Load(jobsConfig)
	require.NoError(t, err)
	c.Stack = testbed.Name(t, "hangar-jobs")
	c.App.Label = "hangar"
	subnets, err := localenv.DefaultSubnets(ctx, ec2c)
	require.NoError(t, err)
	vpc, err := localenv.DefaultVPC(ctx, ec2c)
	require.NoError(t, err)
	for i := range c.Pools {
		p := &c.Pools[i]
		p.Subnets, p.VPCID, p.SecurityGroups = subnets, vpc, nil
		if p.Image.AMI != "" {
			p.Image.AMI = localenv.AMI
		}
	}
	require.NoError(t, c.Validate())
	return c
}

// TestDeployJobsIntoEmulators: a stack serving label-routed jobs deploys into the emulator's
// CloudFormation, but for what the emulator cannot take (the function URL, the event source
// mappings, the secrets, the alarms: reported as gaps, and stood in for by the local world).
// What it made is wired as the functions expect: their environment names the stack's queues,
// the pool documents name the returns queue, and the webhook function built from the deployed
// function's own environment, with the secrets the local world makes under the stack's names,
// takes a signed delivery, records it in the stack's table and puts the job on the stack's jobs
// queue.
func TestDeployJobsIntoEmulators(t *testing.T) {
	testbed.Require(t)
	ctx := testbed.Context(t, 10*time.Minute)
	cfg := testbed.AWSConfig(t)
	c := jobsEmulatorConfig(ctx, t, ec2.NewFromConfig(cfg))

	out := t.TempDir()
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(out)})
	_, err := stack.New(app, c, assets, nil)
	require.NoError(t, err)
	app.Synth(nil)
	d, err := emustack.Deploy(ctx, cfg, out, c.Stack, emustack.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emustack.Delete(context.Background(), cfg, c.Stack) })

	left := map[string]int{}
	for _, g := range d.Gaps {
		t.Logf("emulator gap: %s", g)
		if strings.HasPrefix(g.Done, "not deployed") {
			left[g.Type]++
		}
	}
	for typ, n := range map[string]int{"AWS::Lambda::Url": 1, "AWS::Lambda::EventSourceMapping": 2, "AWS::SecretsManager::Secret": 2} {
		require.Equal(t, n, left[typ], "%s: left out, and only that", typ)
	}
	res, err := cloudformation.NewFromConfig(cfg).ListStackResources(ctx, &cloudformation.ListStackResourcesInput{StackName: aws.String(c.Stack)})
	require.NoError(t, err)
	var functions []string
	for _, r := range res.StackResourceSummaries {
		if aws.ToString(r.ResourceType) == "AWS::Lambda::Function" {
			functions = append(functions, aws.ToString(r.PhysicalResourceId))
		}
	}
	require.ElementsMatch(t, []string{pooldoc.RefreshFunction(c.Stack), pooldoc.RefreshEventsFunction(c.Stack), c.Stack + "-webhook", c.Stack + "-dispatch"}, functions)

	// The queues, as the outputs, the functions and the pool documents name them.
	sqsc := sqs.NewFromConfig(cfg)
	queueURL := func(name string) string {
		q, err := sqsc.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		require.NoError(t, err, name)
		return aws.ToString(q.QueueUrl)
	}
	jobsURL, returnsURL := queueURL(c.Stack+"-jobs"), queueURL(c.Stack+"-returns")
	queueURL(c.Stack + "-jobs-dlq")
	queueURL(c.Stack + "-returns-dlq")
	attrs, err := sqsc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(returnsURL), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll}})
	require.NoError(t, err)
	returnsARN := attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	// A queue's URL in the stack is SQS's canonical one, the emulator's API answers with its own
	// host: the same queue by its path (/<account>/<name>).
	sameQueue := func(want, got, what string) {
		t.Helper()
		w, err := url.Parse(want)
		require.NoError(t, err)
		g, err := url.Parse(got)
		require.NoError(t, err, what)
		require.Equal(t, w.Path, g.Path, what)
	}
	sameQueue(jobsURL, d.Outputs["JobsQueueUrl"], "the JobsQueueUrl output")
	webhookSecret, appSecret := c.Stack+"-webhook-secret", c.Stack+"-github-app"
	require.True(t, strings.HasSuffix(d.Outputs["WebhookSecretArn"], ":secret:"+webhookSecret), "a stand-in: the secret's partial ARN")
	require.True(t, strings.HasSuffix(d.Outputs["AppSecretArn"], ":secret:"+appSecret))
	require.NotEmpty(t, d.Outputs["WebhookUrl"], "a stand-in")

	lambdac := lambda.NewFromConfig(cfg)
	environment := func(fn string) map[string]string {
		conf, err := lambdac.GetFunctionConfiguration(ctx, &lambda.GetFunctionConfigurationInput{FunctionName: aws.String(fn)})
		require.NoError(t, err, fn)
		return conf.Environment.Variables
	}
	ingressEnv, dispatchEnv := environment(c.Stack+"-webhook"), environment(c.Stack+"-dispatch")
	sameQueue(jobsURL, ingressEnv[jobswire.EnvJobsQueueURL], "the webhook function's jobs queue")
	sameQueue(jobsURL, dispatchEnv[jobswire.EnvJobsQueueURL], "the dispatcher's jobs queue")
	require.Equal(t, returnsARN, dispatchEnv[jobswire.EnvReturnsQueueARN])
	require.Equal(t, d.Outputs["AppSecretArn"], dispatchEnv[jobswire.EnvAppSecretARN])
	require.Equal(t, d.Outputs["WebhookSecretArn"], ingressEnv[jobswire.EnvWebhookSecretARN])
	_, err = jobswire.EnvFrom(func(k string) string { return dispatchEnv[k] })
	require.NoError(t, err, "the dispatcher's environment is complete")

	st, err := pooldoc.LoadStack(ctx, ssm.NewFromConfig(cfg), c.Stack)
	require.NoError(t, err)
	require.Len(t, st.Pools, 3)
	for _, doc := range st.Pools {
		if doc.Name == "steps-only" {
			require.Nil(t, doc.Jobs)
			continue
		}
		require.NotNil(t, doc.Jobs, doc.Name)
		require.Equal(t, "hangar", doc.Jobs.StackLabel, doc.Name)
		sameQueue(returnsURL, doc.ReturnsQueueURL, doc.Name+": agents return to the stack's returns queue")
	}

	// The local world's stand-ins: the secrets, made under the stack's names (the user fills in
	// the App's; the stack generates the webhook's), and the webhook function served from its
	// deployed environment, on the stack's table in the emulator.
	smc := secretsmanager.NewFromConfig(cfg)
	const secret = "0123456789abcdefghijklmnopqrstuvwxyzABCD"
	for name, value := range map[string]string{webhookSecret: secret, appSecret: `{"appId": 1, "privateKey": "stand-in"}`} {
		_, err := smc.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(value)})
		require.NoError(t, err, name)
		t.Cleanup(func() {
			_, _ = smc.DeleteSecret(context.Background(), &secretsmanager.DeleteSecretInput{SecretId: aws.String(name), ForceDeleteWithoutRecovery: aws.Bool(true)})
		})
	}
	env, err := jobswire.EnvFrom(func(k string) string { return ingressEnv[k] })
	require.NoError(t, err)
	h, err := jobswire.Ingress(cfg, env, jobswire.Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), DynamoDB: []func(*dynamodb.Options){func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(os.Getenv("AWS_ENDPOINT_URL")) // CloudFormation made the table in the same emulator
	}}})
	require.NoError(t, err)
	const job = 424242
	// installation is the delivery's: 11 is the config's github.installations.
	delivery := func(installation int) webhook.Request {
		body := []byte(fmt.Sprintf(`{"action":"queued","workflow_job":{"id":%d,"run_id":7,"run_attempt":1,"labels":["self-hosted","hangar","linux-x64"]},`+
			`"repository":{"id":77,"full_name":"octo-org/app"},"installation":{"id":%d}}`, job, installation))
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		headers := http.Header{}
		headers.Set(webhook.HeaderEvent, "workflow_job")
		headers.Set(webhook.HeaderDelivery, "d-1")
		headers.Set(webhook.HeaderSignature, "sha256="+hex.EncodeToString(mac.Sum(nil)))
		return webhook.Request{Method: http.MethodPost, Body: body, Headers: headers}
	}
	// The trust set reached the deployed documents: another installation's delivery is refused.
	r := h.Handle(ctx, delivery(99))
	require.Equal(t, http.StatusForbidden, r.Status, r.Body)
	deliver := func() webhook.Response { return h.Handle(ctx, delivery(11)) }
	r = deliver()
	require.Equal(t, http.StatusAccepted, r.Status, r.Body)
	msgs, err := sqsc.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(jobsURL), WaitTimeSeconds: 5, MaxNumberOfMessages: 10})
	require.NoError(t, err)
	require.Len(t, msgs.Messages, 1, "the job on the stack's jobs queue")
	require.Contains(t, aws.ToString(msgs.Messages[0].Body), fmt.Sprint(job))
	require.Contains(t, aws.ToString(msgs.Messages[0].Body), `"linux-x64"`)
	r = deliver()
	require.Equal(t, http.StatusOK, r.Status, "recorded once in the stack's table: %s", r.Body)
}
