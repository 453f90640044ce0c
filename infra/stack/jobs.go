package stack

import (
	"encoding/json"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"

	"github.com/hangar-ci/hangar/internal/wire/jobswire"
	jobmsg "github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/labels/dispatch"
)

// jobs are the resources of label-routed jobs (docs/labels.md, docs/design.md §11), made only
// when some pool has jobs: the GitHub App's two secrets, the jobs queue the webhook function
// fills and the returns queue agents fill, both feeding the dispatcher, and the two functions
// (cmd/webhook's bootstrap in two roles).
type jobs struct {
	queue, dlq          awssqs.Queue
	returns, returnsDLQ awssqs.Queue
	// appSecret and webhookSecret are the secrets' ARNs: the stack's own, or the config's.
	appSecret, webhookSecret *string
	ingress, dispatch        awslambda.Function
	url                      awslambda.FunctionUrl
}

// Settings of the two functions and their queues.
const (
	// The webhook function answers within a second; its URL is public, so its concurrency (and
	// so its cost under a flood of forged deliveries, each refused at the signature) is bounded.
	ingressTimeoutSeconds = 10
	ingressMemoryMiB      = 256
	ingressConcurrency    = 20
	// The dispatcher's batch makes runners on GitHub and launches instances: a couple of minutes
	// at worst. The queues' visibility timeout is not shorter (Lambda requires it).
	dispatchTimeoutSeconds = 120
	dispatchMemoryMiB      = 512
	dispatchConcurrency    = jobsConcurrency + returnsConcurrency
	// The event source mappings share the dispatcher's reserved concurrency, and each stays
	// under it: a mapping that invokes a throttled function gets its batch back after the
	// visibility timeout, counted as a receive, and a burst would age messages into the
	// dead-letter queue for nothing.
	// Under a cap, each return is how the next waiting job gets its instance (a wake hands it
	// on): a wave of jobs that end together comes back together, and with fewer than 8
	// invocations the last returns wait for a free one (docs/benchmarks.md, the burst).
	jobsConcurrency    = 6
	returnsConcurrency = 8
	// A message that failed this many receives is poison: to the dead-letter queue, whose alarm
	// fires.
	jobsMaxReceives    = 10
	returnsMaxReceives = 5
)

// newJobs makes the queues, the secrets and the two functions; the pools' documents then name
// the returns queue, and grantJobs writes the roles' policies.
func newJobs(h *hangar, webhookDir string) *jobs {
	j := &jobs{}
	j.queue, j.dlq = jobQueue(h, "Jobs", h.cfg.Stack+"-jobs", jobsMaxReceives)
	j.returns, j.returnsDLQ = jobQueue(h, "Returns", h.cfg.Stack+"-returns", returnsMaxReceives)
	j.appSecret, j.webhookSecret = jobSecrets(h)

	stack := jsii.String(h.cfg.Stack)
	queueURL := j.queue.QueueUrl()
	j.ingress = jobFunction(h, webhookDir, "Webhook", h.cfg.Stack+"-webhook", h.roles.ingress, ingressTimeoutSeconds, ingressMemoryMiB, ingressConcurrency,
		map[string]*string{
			jobswire.EnvStack: stack, jobswire.EnvRole: jsii.String(jobswire.RoleIngress), jobswire.EnvJobsQueueURL: queueURL,
			jobswire.EnvWebhookSecretARN: j.webhookSecret,
		})
	j.dispatch = jobFunction(h, webhookDir, "Dispatch", h.cfg.Stack+"-dispatch", h.roles.dispatch, dispatchTimeoutSeconds, dispatchMemoryMiB, dispatchConcurrency,
		map[string]*string{
			jobswire.EnvStack: stack, jobswire.EnvRole: jsii.String(jobswire.RoleDispatch), jobswire.EnvJobsQueueURL: queueURL,
			jobswire.EnvReturnsQueueARN: j.returns.QueueArn(), jobswire.EnvAppSecretARN: j.appSecret,
			jobswire.EnvGitHubAPIURL: jsii.String(h.cfg.GitHub.APIURL()), jobswire.EnvSweepEvery: jsii.String(dispatch.DefaultSweepEvery.String()),
		})

	// The sweep (pkg/labels/dispatch/sweep.go): GitHub does not deliver a failed delivery again,
	// so the schedule has the dispatcher, which holds the App's key, ask which failed.
	awsevents.NewRule(h.stack, jsii.String("SweepSchedule"), &awsevents.RuleProps{
		Description: jsii.String("Hangar " + h.cfg.Stack + ": recover webhook deliveries GitHub did not make or the stack did not take"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Seconds(jsii.Number(dispatch.DefaultSweepEvery.Seconds()))),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewSqsQueue(j.queue, &awseventstargets.SqsQueueProps{
			Message: awsevents.RuleTargetInput_FromObject(sweepMessage()), RetryAttempts: jsii.Number(2)})},
	})

	// GitHub cannot sign AWS requests: the delivery's X-Hub-Signature-256 is the gate, checked
	// before anything of the body is read (pkg/labels/webhook).
	j.url = j.ingress.AddFunctionUrl(&awslambda.FunctionUrlOptions{AuthType: awslambda.FunctionUrlAuthType_NONE})

	// Partial batch responses: a message that failed (GitHub down, no capacity) comes back alone
	// after the visibility timeout; the rest of its batch is done.
	app := h.cfg.App
	sources := []struct {
		id          string
		queue       awssqs.Queue
		batch       int
		window      float64
		concurrency int
	}{
		{"JobsSource", j.queue, app.BatchSize, app.BatchWindow.D().Seconds(), jobsConcurrency},
		{"ReturnsSource", j.returns, 10, 0, returnsConcurrency},
	}
	for _, s := range sources {
		m := j.dispatch.AddEventSourceMapping(jsii.String(s.id), &awslambda.EventSourceMappingOptions{
			EventSourceArn:          s.queue.QueueArn(),
			BatchSize:               jsii.Number(float64(s.batch)),
			MaxBatchingWindow:       awscdk.Duration_Seconds(jsii.Number(s.window)),
			ReportBatchItemFailures: jsii.Bool(true),
			MaxConcurrency:          jsii.Number(float64(s.concurrency)),
		})
		// Lambda checks, when it creates a mapping, that the function's role may receive from
		// the queue: the role's policy comes first.
		m.Node().AddDependency(h.roles.dispatch)
	}

	for _, o := range []struct {
		id, what string
		value    *string
	}{
		{"WebhookUrl", "the GitHub App's Webhook URL", j.url.Url()},
		{"AppSecretArn", `the secret to put the GitHub App's {"appId": ..., "privateKey": "..."} in (docs/labels.md)`, j.appSecret},
		{"WebhookSecretArn", "the secret holding the GitHub App's webhook secret", j.webhookSecret},
		{"JobsQueueUrl", "the queue of label-routed jobs the webhook function fills and the dispatcher takes", j.queue.QueueUrl()},
		{"JobsDeadLetterQueueUrl", "where jobs the dispatcher gave up on go (hangar doctor, hangar status)", j.dlq.QueueUrl()},
	} {
		awscdk.NewCfnOutput(h.stack, jsii.String(o.id), &awscdk.CfnOutputProps{Value: o.value, Description: jsii.String(o.what)})
	}
	return j
}

// sweepMessage is jobs.SweepMessage as an object: EventBridge sends an object's JSON as the
// message body, and a text's as a JSON string.
func sweepMessage() map[string]any {
	var m map[string]any
	if err := json.Unmarshal([]byte(jobmsg.SweepMessage), &m); err != nil {
		panic("jobs.SweepMessage is not JSON: " + err.Error()) // a constant: the tests catch it
	}
	return m
}

// jobQueue is one of the queues that feed the dispatcher, with its dead-letter queue: encrypted
// (SQS-managed keys), TLS only, a visibility timeout no shorter than the dispatcher's timeout.
// Their messages are worth a day at most: a job stays queued on GitHub for 24 hours.
func jobQueue(h *hangar, id, name string, maxReceives int) (queue, dlq awssqs.Queue) {
	dlq = awssqs.NewQueue(h.stack, jsii.String(id+"DeadLetters"), &awssqs.QueueProps{
		QueueName:       jsii.String(name + "-dlq"),
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
		RetentionPeriod: awscdk.Duration_Days(jsii.Number(14)),
	})
	queue = awssqs.NewQueue(h.stack, jsii.String(id+"Queue"), &awssqs.QueueProps{
		QueueName:         jsii.String(name),
		Encryption:        awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:        jsii.Bool(true),
		VisibilityTimeout: awscdk.Duration_Seconds(jsii.Number(dispatchTimeoutSeconds)),
		RetentionPeriod:   awscdk.Duration_Days(jsii.Number(1)),
		DeadLetterQueue:   &awssqs.DeadLetterQueue{Queue: dlq, MaxReceiveCount: jsii.Number(float64(maxReceives))},
	})
	return queue, dlq
}

// jobSecrets returns the ARNs of the App's secret and of the webhook secret: the config's, or
// the stack's own. The stack's are encrypted with Secrets Manager's default key
// (aws/secretsmanager): who may read them is decided by IAM alone (GetSecretValue, granted to
// one role each), and no key policy of the stack's has to be trusted as well.
func jobSecrets(h *hangar) (app, webhook *string) {
	a := h.cfg.App
	app, webhook = jsii.String(a.AppSecretARN), jsii.String(a.WebhookSecretARN)
	if a.AppSecretARN == "" {
		// Empty: the user puts the App's id and private key in it (docs/labels.md); until then no
		// job is placed.
		app = awssecretsmanager.NewCfnSecret(h.stack, jsii.String("GitHubAppSecret"), &awssecretsmanager.CfnSecretProps{
			Name:        jsii.String(h.cfg.Stack + "-github-app"),
			Description: jsii.String(`Hangar ` + h.cfg.Stack + `: the GitHub App's {"appId": ..., "privateKey": "..."}; only the dispatcher reads it`),
		}).Ref()
	}
	if a.WebhookSecretARN == "" {
		// Generated, letters and digits only, so that it can be pasted into the App's settings
		// as it is.
		webhook = awssecretsmanager.NewCfnSecret(h.stack, jsii.String("WebhookSecret"), &awssecretsmanager.CfnSecretProps{
			Name:        jsii.String(h.cfg.Stack + "-webhook-secret"),
			Description: jsii.String("Hangar " + h.cfg.Stack + ": the GitHub App's webhook secret; only the webhook function reads it"),
			GenerateSecretString: &awssecretsmanager.CfnSecret_GenerateSecretStringProperty{
				PasswordLength: jsii.Number(40), ExcludePunctuation: jsii.Bool(true), IncludeSpace: jsii.Bool(false),
			},
		}).Ref()
	}
	return app, webhook
}

// jobFunction is one of the two functions: cmd/webhook's bootstrap (arm64, provided.al2023) in
// the role env names, with its own role and log group.
func jobFunction(h *hangar, dir, id, name string, role awsiam.Role, timeout, memory, concurrency int, env map[string]*string) awslambda.Function {
	logs := awslogs.NewLogGroup(h.stack, jsii.String(id+"Logs"), &awslogs.LogGroupProps{
		LogGroupName:  jsii.String("/aws/lambda/" + name),
		Retention:     awslogs.RetentionDays_ONE_MONTH,
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	role.AddToPolicy(statement([]string{"logs:CreateLogStream", "logs:PutLogEvents"}, []*string{logs.LogGroupArn()}, nil))
	return awslambda.NewFunction(h.stack, jsii.String(id), &awslambda.FunctionProps{
		FunctionName:                 jsii.String(name),
		Runtime:                      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture:                 awslambda.Architecture_ARM_64(),
		Handler:                      jsii.String("bootstrap"),
		Code:                         awslambda.Code_FromAsset(jsii.String(dir), nil),
		Role:                         role,
		LogGroup:                     logs,
		MemorySize:                   jsii.Number(float64(memory)),
		Timeout:                      awscdk.Duration_Seconds(jsii.Number(float64(timeout))),
		ReservedConcurrentExecutions: h.reserve(concurrency),
		Environment:                  &env,
	})
}
