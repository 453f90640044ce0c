package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/jsii-runtime-go"

	"github.com/hangar-ci/hangar/pkg/metrics"
)

// newMonitoring adds the alarms (poison in a dead-letter queue, refresh failing, orphans found)
// and a dashboard of the refresh metrics (pkg/refresh/metrics.go).
func newMonitoring(h *hangar, fns refreshFunctions) {
	metric := func(name, pool, stat string) awscloudwatch.Metric {
		dims := map[string]*string{"Stack": jsii.String(h.cfg.Stack), "Pool": jsii.String(pool)}
		return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{Namespace: jsii.String(metrics.Namespace), MetricName: jsii.String(name),
			DimensionsMap: &dims, Statistic: jsii.String(stat), Period: awscdk.Duration_Minutes(jsii.Number(5))})
	}
	alarm := func(id string, m awscloudwatch.IMetric, what string) {
		awscloudwatch.NewAlarm(h.stack, jsii.String(id), &awscloudwatch.AlarmProps{
			Metric: m, Threshold: jsii.Number(0), EvaluationPeriods: jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
			AlarmDescription:   jsii.String(what),
		})
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
	}
}
