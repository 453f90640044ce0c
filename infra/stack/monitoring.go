package stack

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/jsii-runtime-go"

	"github.com/hangar-ci/hangar/pkg/platform/metrics"
	"github.com/hangar-ci/hangar/pkg/refresh/spend"
)

// newMonitoring adds the alarms (poison in a dead-letter queue, refresh failing, orphans found)
// and a dashboard of the refresh metrics (pkg/refresh/metrics.go) and, with label-routed jobs,
// of the dispatcher's and the webhook function's (pkg/labels/dispatch, pkg/labels/webhook).
func newMonitoring(h *hangar, fns refreshFunctions) {
	metric := func(name, pool, stat string) awscloudwatch.Metric {
		dims := map[string]*string{"Stack": jsii.String(h.cfg.Stack), "Pool": jsii.String(pool)}
		return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{Namespace: jsii.String(metrics.Namespace), MetricName: jsii.String(name),
			DimensionsMap: &dims, Statistic: jsii.String(stat), Period: awscdk.Duration_Minutes(jsii.Number(5))})
	}
	// alarm fires on any datum above zero; name, when given, is the alarm's name (CloudFormation
	// names the others).
	alarm := func(id string, m awscloudwatch.IMetric, what string, name ...string) {
		props := &awscloudwatch.AlarmProps{
			Metric: m, Threshold: jsii.Number(0), EvaluationPeriods: jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
			AlarmDescription:   jsii.String(what),
		}
		if len(name) > 0 {
			props.AlarmName = jsii.String(name[0])
		}
		awscloudwatch.NewAlarm(h.stack, jsii.String(id), props)
	}
	// The scheduled refresh is the one that must not fail; the manual function's errors are
	// mostly refusals of bad requests, and show in the workflow that made them.
	alarm("RefreshErrors", fns.events.MetricErrors(nil), "the scheduled refresh (the events function) failed")
	dash := awscloudwatch.NewDashboard(h.stack, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{DashboardName: jsii.String(h.cfg.Stack)})
	for _, p := range h.pools {
		name := p.cfg.Name
		alarm("DeadLetters-"+name, p.dlq.MetricApproximateNumberOfMessagesVisible(nil), "poison messages in pool "+name+"'s dead-letter queue")
		alarm("RefreshPoolErrors-"+name, metric("Errors", name, "Sum"), "refresh reported errors for pool "+name)
		alarm("Orphans-"+name, metric("Orphans", name, "Sum"), "instances without a state item were found and terminated")
		var instances []awscloudwatch.IMetric
		for _, m := range []string{"IdleInstances", "StoppedInstances", "WarmingInstances", "PoolDepth", "HotTarget", "StoppedTarget"} {
			instances = append(instances, metric(m, name, "Maximum"))
		}
		var events []awscloudwatch.IMetric
		for _, m := range []string{"Expired", "Launched", "Stopped", "Orphans", "Errors"} {
			events = append(events, metric(m, name, "Sum"))
		}
		dash.AddWidgets(
			awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{Title: jsii.String(name + ": warm pool"), Left: &instances, Width: jsii.Number(12)}),
			awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{Title: jsii.String(name + ": refresh actions"), Left: &events, Width: jsii.Number(12)}),
		)
		if p.cfg.Jobs != nil {
			jobs := []awscloudwatch.IMetric{metric("JobsReused", name, "Sum"), metric("JobsCreated", name, "Sum"), metric("JobsFailed", name, "Sum")}
			dash.AddWidgets(awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{Title: jsii.String(name + ": label-routed jobs placed"), Left: &jobs, Width: jsii.Number(24)}))
		}
	}
	// What runs cost (pkg/refresh/spend, published by refresh): per repository and pool, by the hour.
	cost := func(dims string) awscloudwatch.IMetric {
		return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression: jsii.String(fmt.Sprintf(`SEARCH('{%s,%s} MetricName="%s" Stack="%s"', 'Sum', 3600)`, metrics.Namespace, dims, spend.MetricCost, h.cfg.Stack)),
			Label:      jsii.String(""),
			Period:     awscdk.Duration_Hours(jsii.Number(1)),
		})
	}
	byRepo, byPool := []awscloudwatch.IMetric{cost("Pool,Repository,Stack")}, []awscloudwatch.IMetric{cost("Pool,Stack")}
	dash.AddWidgets(
		awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{Title: jsii.String("what runs cost, USD an hour, by repository and pool"), Left: &byRepo, Width: jsii.Number(12), Stacked: jsii.Bool(true)}),
		awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{Title: jsii.String("what runs cost, USD an hour, by pool"), Left: &byPool, Width: jsii.Number(12), Stacked: jsii.Bool(true)}),
	)
	if h.jobs != nil {
		newJobsMonitoring(h, dash, alarm)
	}
}

// newJobsMonitoring adds the alarms of label-routed jobs' dead-letter queues (a job that could
// not be placed after every retry; a return that could not be taken) and a graph of the jobs the
// webhook function left alone and the deliveries it refused, by reason.
func newJobsMonitoring(h *hangar, dash awscloudwatch.Dashboard, alarm func(string, awscloudwatch.IMetric, string, ...string)) {
	alarm("JobsDeadLettersAlarm", h.jobs.dlq.MetricApproximateNumberOfMessagesVisible(nil),
		"label-routed jobs that could not be placed after every retry: their log lines name them", h.cfg.Stack+"-jobs-dead-letters")
	alarm("ReturnsDeadLettersAlarm", h.jobs.returnsDLQ.MetricApproximateNumberOfMessagesVisible(nil),
		"agents' returns the dispatcher could not take: those instances go back at their jobs' checks or completed webhooks", h.cfg.Stack+"-returns-dead-letters")
	// These carry a Reason dimension whose values are the code's (pkg/contract/jobs, pkg/labels/webhook): a
	// search graphs whichever occur.
	search := func(metricName string) awscloudwatch.IMetric {
		return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression: jsii.String(fmt.Sprintf(`SEARCH('{%s,Reason,Stack} MetricName="%s" Stack="%s"', 'Sum', 300)`, metrics.Namespace, metricName, h.cfg.Stack)),
			Label:      jsii.String(metricName),
			Period:     awscdk.Duration_Minutes(jsii.Number(5)),
		})
	}
	left := []awscloudwatch.IMetric{search("JobsUnrouted"), search("WebhooksRefused")}
	dash.AddWidgets(awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{Title: jsii.String("label-routed jobs left alone, deliveries refused"), Left: &left, Width: jsii.Number(24)}))
}
