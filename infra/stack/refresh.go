package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/jsii-runtime-go"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// refreshFunctions are the stack's two refresh functions: one code (cmd/refresh's bootstrap,
// arm64, provided.al2023), two invokers.
type refreshFunctions struct {
	// manual is the function the workflows may invoke (the action's mode: refresh); it takes
	// manual refreshes only.
	manual awslambda.Function
	// events is the function EventBridge invokes, and nothing else may: the schedule, spot
	// interruption warnings and instances shutting down or terminated. Were EC2's events taken
	// from the workflows, any allowed repository could mark another's instances terminated.
	events awslambda.Function
}

// newRefresh makes both functions, the schedule and the EC2 events the events function handles.
func newRefresh(h *hangar, dir string) refreshFunctions {
	fns := refreshFunctions{
		manual: refreshFunction(h, dir, "Refresh", pooldoc.RefreshFunction(h.cfg.Stack), nil),
		events: refreshFunction(h, dir, "RefreshEvents", pooldoc.RefreshEventsFunction(h.cfg.Stack),
			map[string]*string{pooldoc.RefreshSourceEnv: jsii.String(pooldoc.RefreshSourceEventBridge)}),
	}
	// The targets add each rule's permission to invoke the events function (its resource policy,
	// for events.amazonaws.com from that rule); no identity of the stack is granted it.
	target := awseventstargets.NewLambdaFunction(fns.events, &awseventstargets.LambdaFunctionProps{RetryAttempts: jsii.Number(0)})
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
	return fns
}

// refreshFunction is one refresh function named name, with its log group and extra environment.
func refreshFunction(h *hangar, dir, id, name string, env map[string]*string) awslambda.Function {
	logs := awslogs.NewLogGroup(h.stack, jsii.String(id+"Logs"), &awslogs.LogGroupProps{
		LogGroupName:  jsii.String("/aws/lambda/" + name),
		Retention:     awslogs.RetentionDays_ONE_MONTH,
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	h.roles.refresh.AddToPolicy(statement([]string{"logs:CreateLogStream", "logs:PutLogEvents"}, []*string{logs.LogGroupArn()}, nil))
	vars := map[string]*string{"HANGAR_STACK": jsii.String(h.cfg.Stack)}
	for k, v := range env {
		vars[k] = v
	}
	return awslambda.NewFunction(h.stack, jsii.String(id), &awslambda.FunctionProps{
		FunctionName:                 jsii.String(name),
		Runtime:                      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture:                 awslambda.Architecture_ARM_64(),
		Handler:                      jsii.String("bootstrap"),
		Code:                         awslambda.Code_FromAsset(jsii.String(dir), nil),
		Role:                         h.roles.refresh,
		LogGroup:                     logs,
		MemorySize:                   jsii.Number(256),
		Timeout:                      awscdk.Duration_Seconds(jsii.Number(55)),
		ReservedConcurrentExecutions: h.reserve(refreshConcurrency),
		Environment:                  &vars,
	})
}

// refreshConcurrency: one refresh at a time is enough; two are safe (leases, conditional writes).
const refreshConcurrency = 2

// reserve is a function's reserved concurrency, n, or none when the config says not to reserve
// (lambda.reserveConcurrency).
func (h *hangar) reserve(n int) *float64 {
	if !h.cfg.Lambda.Reserves() {
		return nil
	}
	return jsii.Number(float64(n))
}
