package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/jsii-runtime-go"

	"github.com/hangar-ci/hangar/pkg/poolconfig"
)

// newRefresh is the refresh function (cmd/refresh's bootstrap, arm64, provided.al2023), its
// schedule, and the EC2 events it handles: spot interruption warnings and instances shutting
// down or terminated.
func newRefresh(h *hangar, dir string) awslambda.Function {
	logs := awslogs.NewLogGroup(h.stack, jsii.String("RefreshLogs"), &awslogs.LogGroupProps{
		LogGroupName:  jsii.String("/aws/lambda/" + h.cfg.Stack + "-refresh"),
		Retention:     awslogs.RetentionDays_ONE_MONTH,
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	h.roles.refresh.AddToPolicy(statement([]string{"logs:CreateLogStream", "logs:PutLogEvents"}, []*string{logs.LogGroupArn()}, nil))
	fn := awslambda.NewFunction(h.stack, jsii.String("Refresh"), &awslambda.FunctionProps{
		FunctionName: jsii.String(poolconfig.RefreshFunction(h.cfg.Stack)),
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture: awslambda.Architecture_ARM_64(),
		Handler:      jsii.String("bootstrap"),
		Code:         awslambda.Code_FromAsset(jsii.String(dir), nil),
		Role:         h.roles.refresh,
		LogGroup:     logs,
		MemorySize:   jsii.Number(256),
		Timeout:      awscdk.Duration_Seconds(jsii.Number(55)),
		// One refresh at a time is enough; two are safe (leases, conditional writes) but waste.
		ReservedConcurrentExecutions: jsii.Number(2),
		Environment:                  &map[string]*string{"HANGAR_STACK": jsii.String(h.cfg.Stack)},
	})
	target := awseventstargets.NewLambdaFunction(fn, &awseventstargets.LambdaFunctionProps{RetryAttempts: jsii.Number(0)})
	awsevents.NewRule(h.stack, jsii.String("RefreshSchedule"), &awsevents.RuleProps{
		Schedule: awsevents.Schedule_Expression(jsii.String(h.cfg.Refresh.Schedule)),
		Targets:  &[]awsevents.IRuleTarget{target},
	})
	awsevents.NewRule(h.stack, jsii.String("SpotInterruptions"), &awsevents.RuleProps{
		EventPattern: &awsevents.EventPattern{Source: jsii.Strings("aws.ec2"), DetailType: jsii.Strings("EC2 Spot Instance Interruption Warning")},
		Targets:      &[]awsevents.IRuleTarget{target},
	})
	awsevents.NewRule(h.stack, jsii.String("InstanceStateChanges"), &awsevents.RuleProps{
		EventPattern: &awsevents.EventPattern{Source: jsii.Strings("aws.ec2"), DetailType: jsii.Strings("EC2 Instance State-change Notification"),
			Detail: &map[string]interface{}{"state": []string{"shutting-down", "terminated"}}},
		Targets: &[]awsevents.IRuleTarget{target},
	})
	return fn
}
