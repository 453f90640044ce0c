package stack

import (
	"fmt"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/jsii-runtime-go"

	jobmsg "github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/labels/webhook"
	"github.com/hangar-ci/hangar/pkg/platform/metrics"
	"github.com/hangar-ci/hangar/pkg/refresh/spend"
)

// newMonitoring adds the alarms (poison in a dead-letter queue, refresh failing, orphans found,
// label-routed jobs failed), each notifying the alarm topic, and a dashboard of the refresh metrics (pkg/refresh/metrics.go) and, with label-routed jobs,
// of the dispatcher's and the webhook function's (pkg/labels/dispatch, pkg/labels/webhook).
func newMonitoring(h *hangar, fns refreshFunctions) {
	metric := func(name, pool, stat string) awscloudwatch.Metric {
		dims := map[string]*string{"Stack": jsii.String(h.cfg.Stack), "Pool": jsii.String(pool)}
		return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{Namespace: jsii.String(metrics.Namespace), MetricName: jsii.String(name),
			DimensionsMap: &dims, Statistic: jsii.String(stat), Period: awscdk.Duration_Minutes(jsii.Number(5))})
	}
	notify := awscloudwatchactions.NewSnsAction(alarmTopic(h))
	// alarm fires on a five-minute sum above threshold, and tells the alarm topic when it fires
	// and when it clears; name, when given, is the alarm's name (CloudFormation names the others).
	alarm := func(id string, m awscloudwatch.IMetric, threshold float64, what string, name ...string) {
		props := &awscloudwatch.AlarmProps{
			Metric: m, Threshold: jsii.Number(threshold), EvaluationPeriods: jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
			AlarmDescription:   jsii.String(what),
		}
		if len(name) > 0 {
			props.AlarmName = jsii.String(name[0])
		}
		a := awscloudwatch.NewAlarm(h.stack, jsii.String(id), props)
		a.AddAlarmAction(notify)
		a.AddOkAction(notify)
	}
	// The scheduled refresh is the one that must not fail; the manual function's errors are
	// mostly refusals of bad requests, and show in the workflow that made them.
	alarm("RefreshErrors", fns.events.MetricErrors(nil), 0, "the scheduled refresh (the events function) failed")
	dash := awscloudwatch.NewDashboard(h.stack, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{DashboardName: jsii.String(h.cfg.Stack)})
	for _, p := range h.pools {
		name := p.cfg.Name
		alarm("DeadLetters-"+name, p.dlq.MetricApproximateNumberOfMessagesVisible(nil), 0, "poison messages in pool "+name+"'s dead-letter queue")
		alarm("RefreshPoolErrors-"+name, metric("Errors", name, "Sum"), 0, "refresh reported errors for pool "+name)
		alarm("Orphans-"+name, metric("Orphans", name, "Sum"), 0, "instances without a state item were found and terminated")
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
			alarm("JobsFailed-"+name, metric("JobsFailed", name, "Sum"), 0, "label-routed jobs of pool "+name+" the dispatcher gave up on: its log lines name them")
			placed := []awscloudwatch.IMetric{metric("JobsReused", name, "Sum"), metric("JobsCreated", name, "Sum"), metric("JobsFailed", name, "Sum")}
			dash.AddWidgets(awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{Title: jsii.String(name + ": label-routed jobs placed"), Left: &placed, Width: jsii.Number(24)}))
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

// refusedPerFiveMinutes is how many refused deliveries in five minutes the stack takes for noise:
// scanners and stray requests stay below it, a wrong secret or a flood does not.
const refusedPerFiveMinutes = 10

// alarmTopic is the SNS topic every alarm of the stack notifies: alarms.topicArn, or the stack's
// own <stack>-alarms; alarms.emails are subscribed to it.
func alarmTopic(h *hangar) awssns.ITopic {
	var topic awssns.ITopic
	if arn := h.cfg.Alarms.TopicARN; arn != "" {
		topic = awssns.Topic_FromTopicArn(h.stack, jsii.String("AlarmTopic"), jsii.String(arn))
	} else {
		topic = awssns.NewTopic(h.stack, jsii.String("AlarmTopic"), &awssns.TopicProps{TopicName: jsii.String(h.cfg.Stack + "-alarms"),
			DisplayName: jsii.String("Hangar " + h.cfg.Stack + " alarms")})
	}
	for _, e := range h.cfg.Alarms.Emails {
		topic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(e), nil))
	}
	return topic
}

// newJobsMonitoring adds the alarms of label-routed jobs' dead-letter queues (a job that could
// not be placed after every retry; a return that could not be taken) and a graph of the jobs the
// webhook function left alone and the deliveries it refused, by reason.
func newJobsMonitoring(h *hangar, dash awscloudwatch.Dashboard, alarm func(string, awscloudwatch.IMetric, float64, string, ...string)) {
	alarm("JobsDeadLettersAlarm", h.jobs.dlq.MetricApproximateNumberOfMessagesVisible(nil), 0,
		"label-routed jobs that could not be placed after every retry: their log lines name them", h.cfg.Stack+"-jobs-dead-letters")
	alarm("ReturnsDeadLettersAlarm", h.jobs.returnsDLQ.MetricApproximateNumberOfMessagesVisible(nil), 0,
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
	// sum is the total of a metric over the reasons the code names, for an alarm (which cannot
	// SEARCH).
	sum := func(metricName string, reasons []string) awscloudwatch.IMetric {
		using := map[string]awscloudwatch.IMetric{}
		var terms []string
		for i, r := range reasons {
			id := fmt.Sprintf("m%d", i)
			dims := map[string]*string{"Stack": jsii.String(h.cfg.Stack), "Reason": jsii.String(r)}
			using[id] = awscloudwatch.NewMetric(&awscloudwatch.MetricProps{Namespace: jsii.String(metrics.Namespace), MetricName: jsii.String(metricName),
				DimensionsMap: &dims, Statistic: jsii.String("Sum"), Period: awscdk.Duration_Minutes(jsii.Number(5))})
			terms = append(terms, "FILL("+id+",0)")
		}
		return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression: jsii.String(strings.Join(terms, "+")), UsingMetrics: &using, Label: jsii.String(metricName),
			Period: awscdk.Duration_Minutes(jsii.Number(5)),
		})
	}
	alarm("JobsUnroutedAlarm", sum("JobsUnrouted", []string{jobmsg.ReasonUnknown, jobmsg.ReasonAmbiguous}), 0,
		"label-routed jobs whose labels name no pool, or two: the webhook's log lines name them", h.cfg.Stack+"-jobs-unrouted")
	alarm("WebhookErrorsAlarm", sum("WebhookErrors", webhook.ErrorReasons), 0,
		"deliveries the webhook failed on the stack's side (secret or pools unreadable, table or jobs queue refusing): GitHub does not deliver them again by itself; redeliver them from the App's settings", h.cfg.Stack+"-webhook-errors")
	appDims := map[string]*string{"Stack": jsii.String(h.cfg.Stack)}
	alarm("AppErrorsAlarm", awscloudwatch.NewMetric(&awscloudwatch.MetricProps{Namespace: jsii.String(metrics.Namespace), MetricName: jsii.String("AppErrors"),
		DimensionsMap: &appDims, Statistic: jsii.String("Sum"), Period: awscdk.Duration_Minutes(jsii.Number(5))}), 0,
		"the GitHub App cannot make runners (a key GitHub refuses, a permission the installation lacks): jobs wait, nothing is launched; the dispatcher's log lines say why",
		h.cfg.Stack+"-app-errors")
	alarm("SweepErrorsAlarm", awscloudwatch.NewMetric(&awscloudwatch.MetricProps{Namespace: jsii.String(metrics.Namespace), MetricName: jsii.String("SweepErrors"),
		DimensionsMap: &appDims, Statistic: jsii.String("Sum"), Period: awscdk.Duration_Minutes(jsii.Number(5))}), 0,
		"the sweep for lost deliveries failed (GitHub refused the App or is down): failed deliveries and jobs no delivery brought are not being recovered; the dispatcher's log lines say why",
		h.cfg.Stack+"-sweep-errors")
	// A few refusals are the internet's background noise; more than refusedPerFiveMinutes is a
	// wrong webhook secret (every delivery), a repository outside the trust set, or a flood.
	alarm("WebhooksRefusedAlarm", sum("WebhooksRefused", webhook.RefusalReasons), refusedPerFiveMinutes,
		"deliveries refused (bad signature, outside the trust set, malformed): the webhook's log lines say why", h.cfg.Stack+"-webhooks-refused")
	left := []awscloudwatch.IMetric{search("JobsUnrouted"), search("WebhooksRefused")}
	dash.AddWidgets(awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{Title: jsii.String("label-routed jobs left alone, deliveries refused"), Left: &left, Width: jsii.Number(24)}))
}
