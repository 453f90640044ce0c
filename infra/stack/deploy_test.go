package stack_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
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
	"github.com/hangar-ci/hangar/pkg/poolconfig"
	"github.com/hangar-ci/hangar/pkg/refresh"
	"github.com/hangar-ci/hangar/pkg/state"
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
	p.Warm = poolconfig.Warm{Schedules: []poolconfig.Schedule{{Name: "always", Hot: 3}}}
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
	for _, want := range []string{"AWS::DynamoDB::Table", "AWS::KMS::Key", "AWS::SQS::Queue", "AWS::EC2::LaunchTemplate", "AWS::SSM::Parameter",
		"AWS::Lambda::Function", "AWS::Events::Rule", "AWS::IAM::Role", "AWS::IAM::InstanceProfile", "AWS::EC2::SecurityGroup"} {
		require.Contains(t, types, want, "created")
	}
	function := poolconfig.RefreshFunction(c.Stack)
	require.ElementsMatch(t, []string{function, poolconfig.RefreshEventsFunction(c.Stack)}, functions,
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
