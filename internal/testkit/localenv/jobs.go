package localenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/hangar-ci/hangar/internal/testkit/awsproxy"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/internal/wire/jobswire"
	jobmsg "github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/labels/dispatch"
	"github.com/hangar-ci/hangar/pkg/labels/webhook"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/platform/ghapp"
)

// JobsOptions shape the label-routed part of a world.
type JobsOptions struct {
	// Label is the stack label (default hangar).
	Label string
	// Labels are the pool's job labels (default linux-x64).
	Labels []string
	// Owners are the accounts the App is installed on (default: the owner of Repo).
	Owners []string
	// Scope is the pool's jobs.scope (default repository); with organization, the Owners are
	// organisations.
	Scope string
	// MaxInstances is the pool's maxInstances (0: no bound).
	MaxInstances int
	// CheckAfter is the bound of a runner waiting for a job (default one minute).
	CheckAfter time.Duration
	// BatchSize and BatchWindow are the jobs queue's event source mapping's (default 10 and 0):
	// the poller takes what one receive brings, then more until BatchSize or BatchWindow.
	BatchSize   int
	BatchWindow time.Duration
	// Visibility is the jobs queue's visibility timeout: how long a failed message waits before it
	// is delivered again (default 10 s; the stack's is two minutes).
	Visibility time.Duration
	Log        *slog.Logger
	// EC2, when set, wraps the dispatcher's EC2 client (tests count or break its calls).
	EC2 func(base awsapi.EC2) awsapi.EC2
	// SweepEvery and MissingAfter are the dispatcher's (0: its defaults); SweepSchedule puts the
	// sweep message on the jobs queue at that period, as the stack's schedule does (0: never).
	SweepEvery, MissingAfter, SweepSchedule time.Duration
	// JobsPollers and ReturnsPollers are how many batches of each queue are handled at once (at
	// least one), as the stack's event source mappings' maximum concurrency lets Lambda run
	// several invocations.
	JobsPollers, ReturnsPollers int
	// Unregistered leaves the App unregistered and its secrets as the stack made them: hangar
	// setup registers it through the stand-in's manifest flow, with the stack's webhook URL,
	// whose deliveries reach the local webhook function (ghfake.RouteHook).
	Unregistered bool
	// FailEvery makes the Function URL answer every nth delivery 503 without handling it, as a
	// throttled function does (0: none).
	FailEvery int
}

// Jobs is the label-routed part of a local world: the App in the GitHub stand-in, installed on
// Owners; its webhook and private key in Secrets Manager; the webhook function's handler served on
// a loopback address as the Function URL serves it in AWS, where the stand-in sends its
// deliveries; the jobs and returns queues; and the dispatcher, fed by them as Lambda's event
// source mappings feed it. The handlers are the very ones cmd/webhook runs, wired by jobswire.
type Jobs struct {
	e             *Env
	AppID         int64
	Installations map[string]int64
	// URL is the webhook URL (the stack's WebhookUrl output).
	URL string
	// functionURL is the deployed stack's WebhookUrl output: the App's webhook after setup.
	functionURL string
	// HTTPProxy, with Unregistered, is a proxy that takes requests for the stack's Function URL
	// to the local webhook function, as the internet takes them to Lambda: hangar doctor's ping
	// goes through it (HTTP_PROXY).
	HTTPProxy string
	// failEvery is FailEvery, changed by SetFailEvery.
	failEvery                                 atomic.Int64
	Secret                                    string
	JobsQueueURL, JobsDLQURL, ReturnsQueueURL string
	Ingress                                   *webhook.Handler
	Dispatcher                                *dispatch.Dispatcher
	App                                       *ghapp.App
	// Metrics holds the functions' metric lines.
	Metrics testbed.Buffer
	// Moto and DDB are the functions' AWS traffic (counted, breakable); GitHub their GitHub API
	// traffic.
	Moto, DDB *awsproxy.Proxy
	GitHub    *GitHubTraffic

	key                            []byte // the App's private key in use
	webhookSecretARN, appSecretARN string
	batchSize                      int
	batchWindow                    time.Duration
	paused                         atomic.Bool
	resume                         chan struct{}
	mu                             sync.Mutex
	batches                        []int // sizes of the batches handed to the dispatcher
	handled                        atomic.Int64
	handler                        []time.Duration // the webhook handler's time per delivery
}

// appID is the local App's id.
const appID = 4242

// ServeJobs adds label-routed jobs to the world. Call it before any instance is launched: the
// agents read the pool document (with its returns queue) when they start. On a Deployed world
// the queues, the pools' jobs settings and the functions' environment are the stack's (as
// emustack deployed it); the secrets, which the emulator cannot make, are made under the stack's
// names, and the Function URL and the event source mappings are stood in for here.
func (e *Env) ServeJobs(ctx context.Context, o JobsOptions) (*Jobs, error) {
	if o.Label == "" {
		o.Label = "hangar"
	}
	if len(o.Labels) == 0 {
		o.Labels = []string{"linux-x64"}
	}
	if len(o.Owners) == 0 {
		owner, _, _ := strings.Cut(Repo, "/")
		o.Owners = []string{owner}
	}
	if o.CheckAfter == 0 {
		o.CheckAfter = time.Minute
	}
	if o.Scope == "" {
		o.Scope = pooldoc.JobScopeRepository
	}
	if o.BatchSize == 0 {
		o.BatchSize = 10
	}
	if o.Visibility == 0 {
		o.Visibility = 10 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	j := &Jobs{e: e, AppID: appID, Installations: map[string]int64{}, batchSize: o.BatchSize, batchWindow: o.BatchWindow,
		resume: make(chan struct{})}
	var (
		env jobswire.Env
		err error
	)
	if e.deployed {
		env, err = e.deployedJobs(ctx, j)
	} else {
		env, err = e.localJobs(ctx, j, o)
	}
	if err != nil {
		return nil, err
	}
	env.CheckAfter, env.SweepEvery, env.MissingAfter = o.CheckAfter, o.SweepEvery, o.MissingAfter

	if o.Unregistered {
		// The two secrets as the stack makes them: the webhook secret generated, the App's
		// without a value until hangar setup puts one.
		j.Secret = "whsec-" + randomSuffix() + randomSuffix()
		if env.WebhookSecretARN, err = e.putSecret(ctx, secretName(env.WebhookSecretARN, e.Stack+"-webhook-secret"), j.Secret); err != nil {
			return nil, err
		}
		if env.AppSecretARN, err = e.putSecret(ctx, secretName(env.AppSecretARN, e.Stack+"-github-app"), ""); err != nil {
			return nil, err
		}
	} else if err := e.registerApp(ctx, j, o, &env); err != nil {
		return nil, err
	}
	j.webhookSecretARN, j.appSecretARN = env.WebhookSecretARN, env.AppSecretARN
	// The functions' AWS traffic goes through counting proxies, as the steps' does in the
	// benchmarks; their GitHub traffic through a counting transport.
	if j.Moto, err = awsproxy.New(os.Getenv("AWS_ENDPOINT_URL"), 1); err != nil {
		return nil, err
	}
	e.closers = append(e.closers, j.Moto.Close)
	if j.DDB, err = awsproxy.New(e.ddbURL, 2); err != nil {
		return nil, err
	}
	e.closers = append(e.closers, j.DDB.Close)
	j.GitHub = &GitHubTraffic{base: e.GH.HTTPClient().Transport}
	cfg := e.AWS.Copy()
	cfg.BaseEndpoint = aws.String(j.Moto.URL())
	wo := jobswire.Options{Log: o.Log, Metrics: &j.Metrics, GitHub: j.GitHub,
		DynamoDB: []func(*dynamodb.Options){func(d *dynamodb.Options) {
			d.BaseEndpoint = aws.String(j.DDB.URL())
			d.DisableValidateResponseChecksum = true // DynamoDB Local's errors carry no CRC32
		}}}
	if o.EC2 != nil {
		wo.EC2 = o.EC2(ec2.NewFromConfig(cfg))
	}
	env.Role = jobswire.RoleIngress
	if j.Ingress, err = jobswire.Ingress(cfg, env, wo); err != nil {
		return nil, err
	}
	env.Role = jobswire.RoleDispatch
	if j.Dispatcher, j.App, err = jobswire.Dispatcher(ctx, cfg, env, wo); err != nil {
		return nil, err
	}
	var deliveries atomic.Int64
	j.failEvery.Store(int64(o.FailEvery))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, every := deliveries.Add(1), j.failEvery.Load(); every > 0 && n%every == 0 {
			http.Error(w, "Rate Exceeded.", http.StatusServiceUnavailable) // a throttled Function URL's answer
			return
		}
		start := time.Now()
		j.Ingress.ServeHTTP(w, r)
		j.mu.Lock()
		j.handler = append(j.handler, time.Since(start))
		j.mu.Unlock()
	}))
	j.URL = srv.URL
	if o.Unregistered {
		if !e.deployed {
			return nil, errors.New("localenv: JobsOptions.Unregistered needs a deployed stack (Options.Deployed): hangar setup reads its outputs")
		}
		e.GH.RouteHook(j.functionURL, srv.URL)
		proxy, err := functionProxy(j.functionURL, srv.URL)
		if err != nil {
			srv.Close()
			return nil, err
		}
		e.closers = append(e.closers, proxy.Close)
		j.HTTPProxy = proxy.URL
	} else {
		e.GH.SetWebhook(srv.URL, j.Secret)
	}

	pollCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range max(1, o.JobsPollers) {
		wg.Go(func() { j.poll(pollCtx, j.JobsQueueURL, dispatch.FromJobs, o.Log) })
	}
	for range max(1, o.ReturnsPollers) {
		wg.Go(func() { j.poll(pollCtx, j.ReturnsQueueURL, dispatch.FromReturns, o.Log) })
	}
	if o.SweepSchedule > 0 {
		wg.Go(func() { j.schedule(pollCtx, o.SweepSchedule, o.Log) })
	}
	// Last in, first out: the pollers stop before the webhook URL, the queues and the secrets go.
	e.closers = append(e.closers, func() {
		stop()
		j.Resume()
		wg.Wait()
		srv.Close()
	})
	return j, nil
}

// localJobs makes what the stack makes for label-routed jobs, for a world without a deployed
// stack: the jobs and returns queues, and the pool's jobs settings.
func (e *Env) localJobs(ctx context.Context, j *Jobs, o JobsOptions) (jobswire.Env, error) {
	jobsQ, jobsDLQ, err := e.createJobsQueue(ctx, e.Stack+"-jobs", o.Visibility, 10)
	if err != nil {
		return jobswire.Env{}, err
	}
	returnsQ, _, err := e.createJobsQueue(ctx, e.Stack+"-returns", 30*time.Second, 5)
	if err != nil {
		return jobswire.Env{}, err
	}
	j.JobsQueueURL, j.JobsDLQURL, j.ReturnsQueueURL = jobsQ, jobsDLQ, returnsQ
	returnsARN, err := queueARN(ctx, sqs.NewFromConfig(e.AWS), returnsQ)
	if err != nil {
		return jobswire.Env{}, err
	}
	// The pool serves jobs, as a redeploy with jobs in the config would make it.
	if err := e.UpdatePool(ctx, func(d *pooldoc.Document) {
		d.Jobs = &pooldoc.Jobs{StackLabel: o.Label, Labels: o.Labels, Scope: o.Scope}
		d.MaxInstances = o.MaxInstances
		d.ReturnsQueueURL = returnsQ
	}); err != nil {
		return jobswire.Env{}, err
	}
	return jobswire.Env{Stack: e.Stack, JobsQueueURL: jobsQ, ReturnsQueueARN: returnsARN, GitHubAPIURL: e.GH.URL()}, nil
}

// SetFailEvery makes the Function URL answer every nth delivery from now on 503 (0: none), as
// JobsOptions.FailEvery does from the start.
func (j *Jobs) SetFailEvery(n int) { j.failEvery.Store(int64(n)) }

// functionProxy is an HTTP proxy that sends requests for functionURL's host to local, and
// refuses any other.
func functionProxy(functionURL, local string) (*httptest.Server, error) {
	from, err := url.Parse(functionURL)
	if err != nil {
		return nil, fmt.Errorf("localenv: the stack's WebhookUrl %q: %w", functionURL, err)
	}
	to, err := url.Parse(local)
	if err != nil {
		return nil, err
	}
	rp := httputil.NewSingleHostReverseProxy(to)
	rp.ErrorHandler = awsproxy.QuietErrors
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Host != from.Host {
			http.Error(w, "localenv: this proxy reaches the stack's Function URL only", http.StatusBadGateway)
			return
		}
		r.Host = to.Host
		rp.ServeHTTP(w, r)
	})), nil
}

// registerApp plays the App's registration by hand: the stand-in's App with a new key, installed
// on the owners, and its credentials and a webhook secret put in the two secrets.
func (e *Env) registerApp(ctx context.Context, j *Jobs, o JobsOptions, env *jobswire.Env) error {
	key := e.GH.EnableApp(j.AppID)
	for _, owner := range o.Owners {
		j.Installations[owner] = e.GH.Install(owner)
		if o.Scope == pooldoc.JobScopeOrganization {
			e.GH.SetOrg(owner)
		}
	}
	j.Secret = "whsec-" + randomSuffix() + randomSuffix()
	creds, _ := json.Marshal(ghapp.Credentials{AppID: j.AppID, PrivateKey: string(key)})
	j.key = key
	var err error
	if env.WebhookSecretARN, err = e.putSecret(ctx, secretName(env.WebhookSecretARN, e.Stack+"-webhook-secret"), j.Secret); err != nil {
		return err
	}
	env.AppSecretARN, err = e.putSecret(ctx, secretName(env.AppSecretARN, e.Stack+"-github-app"), string(creds))
	return err
}

// deployedJobs reads the deployed stack's functions' environment (the stack gives each role
// what it needs), and finds the jobs queue and its dead-letter queue by the stack's names.
func (e *Env) deployedJobs(ctx context.Context, j *Jobs) (jobswire.Env, error) {
	client := lambda.NewFromConfig(e.AWS)
	vars := map[string]string{}
	for _, fn := range []string{e.Stack + "-webhook", e.Stack + "-dispatch"} {
		conf, err := client.GetFunctionConfiguration(ctx, &lambda.GetFunctionConfigurationInput{FunctionName: aws.String(fn)})
		if err != nil {
			return jobswire.Env{}, fmt.Errorf("the deployed stack's function %s (does a pool have jobs?): %w", fn, err)
		}
		if conf.Environment != nil {
			for k, v := range conf.Environment.Variables {
				vars[k] = v
			}
		}
	}
	env := jobswire.Env{Stack: e.Stack, JobsQueueURL: vars[jobswire.EnvJobsQueueURL], ReturnsQueueARN: vars[jobswire.EnvReturnsQueueARN],
		WebhookSecretARN: vars[jobswire.EnvWebhookSecretARN], AppSecretARN: vars[jobswire.EnvAppSecretARN], GitHubAPIURL: vars[jobswire.EnvGitHubAPIURL]}
	sqsClient := sqs.NewFromConfig(e.AWS)
	for name, dst := range map[string]*string{e.Stack + "-jobs": &j.JobsQueueURL, e.Stack + "-jobs-dlq": &j.JobsDLQURL, e.Stack + "-returns": &j.ReturnsQueueURL} {
		q, err := sqsClient.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err != nil {
			return jobswire.Env{}, fmt.Errorf("the deployed stack's queue %s: %w", name, err)
		}
		*dst = aws.ToString(q.QueueUrl)
	}
	// The stack names its queues by SQS's canonical URLs; the emulator answers at its own.
	env.JobsQueueURL = j.JobsQueueURL
	out, err := cloudformation.NewFromConfig(e.AWS).DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(e.Stack)})
	if err != nil || len(out.Stacks) == 0 {
		return jobswire.Env{}, fmt.Errorf("the deployed stack %s's outputs: %w", e.Stack, err)
	}
	for _, o := range out.Stacks[0].Outputs {
		if aws.ToString(o.OutputKey) == "WebhookUrl" {
			j.functionURL = aws.ToString(o.OutputValue)
		}
	}
	return env, nil
}

// secretName is the name part of a secret's (partial) ARN, or fallback.
func secretName(arn, fallback string) string {
	if _, name, ok := strings.Cut(arn, ":secret:"); ok && name != "" {
		return name
	}
	return fallback
}

// schedule puts the sweep message on the jobs queue every period, as the stack's EventBridge rule
// does, until ctx ends.
func (j *Jobs) schedule(ctx context.Context, period time.Duration, log *slog.Logger) {
	client := sqs.NewFromConfig(j.e.AWS)
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(j.JobsQueueURL), MessageBody: aws.String(jobmsg.SweepMessage)}); err != nil && ctx.Err() == nil {
			log.Error("the sweep schedule", "error", err)
		}
	}
}

// Pause holds the dispatcher: messages pile up on the queues (a burst arriving within one
// batching window), until Resume.
func (j *Jobs) Pause() { j.paused.Store(true) }

// Resume lets the dispatcher take the queues again.
func (j *Jobs) Resume() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.paused.Swap(false) {
		close(j.resume)
		j.resume = make(chan struct{})
	}
}

// Batches returns the sizes of the batches the dispatcher was handed from the jobs queue.
func (j *Jobs) Batches() []int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.batches)
}

// Handled counts the messages the dispatcher has handled (from both queues).
func (j *Jobs) Handled() int64 { return j.handled.Load() }

// QueueJob queues a job of repo, run run, for a runner with labels, that runs command: the
// stand-in delivers its queued webhook. It returns the job's id.
func (j *Jobs) QueueJob(repo string, run int64, labels []string, command string) int64 {
	return j.e.GH.QueueWorkflowJob(repo, run, labels, command)
}

// poll feeds one queue to the dispatcher, as a Lambda event source mapping does: a long poll,
// then more receives until the batch is full or the window has passed, then one invocation with
// the batch, whose partial batch response leaves the failed messages for SQS to deliver again.
func (j *Jobs) poll(ctx context.Context, queue string, source dispatch.Source, log *slog.Logger) {
	client := sqs.NewFromConfig(j.e.AWS)
	for ctx.Err() == nil {
		if j.paused.Load() {
			j.mu.Lock()
			resume := j.resume
			j.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-resume:
			}
			continue
		}
		batch, handles := j.receive(ctx, client, queue, 1, source, j.batchSize)
		if len(batch) == 0 {
			continue
		}
		if j.paused.Load() {
			// Paused while this receive waited: give the messages back for after the pause.
			j.release(ctx, client, queue, handles)
			continue
		}
		deadline := time.Now().Add(j.batchWindow)
		for len(batch) < j.batchSize && time.Now().Before(deadline) && ctx.Err() == nil {
			more, h := j.receive(ctx, client, queue, 0, source, j.batchSize-len(batch))
			if len(more) == 0 {
				break
			}
			batch = append(batch, more...)
			for k, v := range h {
				handles[k] = v
			}
		}
		if source == dispatch.FromJobs {
			j.mu.Lock()
			j.batches = append(j.batches, len(batch))
			j.mu.Unlock()
		}
		failed := j.Dispatcher.Handle(ctx, batch)
		j.handled.Add(int64(len(batch)))
		var done []sqstypes.DeleteMessageBatchRequestEntry
		for _, m := range batch {
			if !slices.Contains(failed, m.ID) {
				done = append(done, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(len(done))), ReceiptHandle: aws.String(handles[m.ID])})
			}
		}
		for start := 0; start < len(done); start += 10 {
			if _, err := client.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{QueueUrl: &queue,
				Entries: done[start:min(start+10, len(done))]}); err != nil {
				log.Warn("localenv: delete handled messages", "queue", queue, "error", err)
			}
		}
	}
}

// release makes received messages visible again at once.
func (j *Jobs) release(ctx context.Context, client *sqs.Client, queue string, handles map[string]string) {
	var entries []sqstypes.ChangeMessageVisibilityBatchRequestEntry
	for _, h := range handles {
		entries = append(entries, sqstypes.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(len(entries))),
			ReceiptHandle: aws.String(h), VisibilityTimeout: 0})
	}
	for start := 0; start < len(entries); start += 10 {
		_, _ = client.ChangeMessageVisibilityBatch(context.WithoutCancel(ctx), &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &queue,
			Entries: entries[start:min(start+10, len(entries))]})
	}
}

// receive takes up to n messages (at most 10) from queue, waiting up to wait seconds.
func (j *Jobs) receive(ctx context.Context, client *sqs.Client, queue string, wait int32, source dispatch.Source, n int) ([]dispatch.Message, map[string]string) {
	out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &queue, MaxNumberOfMessages: int32(min(n, 10)), WaitTimeSeconds: wait,
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount}})
	if err != nil || len(out.Messages) == 0 {
		return nil, nil
	}
	batch := make([]dispatch.Message, 0, len(out.Messages))
	handles := map[string]string{}
	for _, m := range out.Messages {
		receives, _ := strconv.Atoi(m.Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)])
		batch = append(batch, dispatch.Message{ID: aws.ToString(m.MessageId), Body: aws.ToString(m.Body), Source: source, Receives: receives})
		handles[aws.ToString(m.MessageId)] = aws.ToString(m.ReceiptHandle)
	}
	return batch, handles
}

// createJobsQueue makes a queue with a dead-letter queue after maxReceives, as the stack does.
func (e *Env) createJobsQueue(ctx context.Context, name string, visibility time.Duration, maxReceives int) (string, string, error) {
	client := sqs.NewFromConfig(e.AWS)
	dlq, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq")})
	if err != nil {
		return "", "", fmt.Errorf("create queue %s-dlq: %w", name, err)
	}
	e.closers = append(e.closers, func() { _, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: dlq.QueueUrl}) })
	arn, err := queueARN(ctx, client, aws.ToString(dlq.QueueUrl))
	if err != nil {
		return "", "", err
	}
	redrive, _ := json.Marshal(map[string]string{"deadLetterTargetArn": arn, "maxReceiveCount": strconv.Itoa(maxReceives)})
	q, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{
		"RedrivePolicy": string(redrive), "VisibilityTimeout": strconv.Itoa(int(visibility / time.Second))}})
	if err != nil {
		return "", "", fmt.Errorf("create queue %s: %w", name, err)
	}
	e.closers = append(e.closers, func() { _, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
	return aws.ToString(q.QueueUrl), aws.ToString(dlq.QueueUrl), nil
}

func queueARN(ctx context.Context, client *sqs.Client, url string) (string, error) {
	attrs, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		return "", fmt.Errorf("the ARN of queue %s: %w", url, err)
	}
	return attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)], nil
}

// putSecret creates a secret holding value (none when empty; removed again by Close) and returns
// its ARN.
func (e *Env) putSecret(ctx context.Context, name, value string) (string, error) {
	client := secretsmanager.NewFromConfig(e.AWS)
	in := &secretsmanager.CreateSecretInput{Name: aws.String(name)}
	if value != "" {
		in.SecretString = aws.String(value)
	}
	out, err := client.CreateSecret(ctx, in)
	if err != nil {
		return "", fmt.Errorf("create secret %s: %w", name, err)
	}
	e.closers = append(e.closers, func() {
		_, _ = client.DeleteSecret(context.Background(), &secretsmanager.DeleteSecretInput{SecretId: out.ARN, ForceDeleteWithoutRecovery: aws.Bool(true)})
	})
	return aws.ToString(out.ARN), nil
}

// RotateAppKey rotates the App's private key as docs/labels.md says to: a new key made in the
// App's settings, put in the App secret, and the old key deleted on GitHub.
func (j *Jobs) RotateAppKey(ctx context.Context) error {
	fresh := j.e.GH.AddAppKey()
	creds, _ := json.Marshal(ghapp.Credentials{AppID: j.AppID, PrivateKey: string(fresh)})
	if err := j.e.setSecret(ctx, j.appSecretARN, string(creds)); err != nil {
		return err
	}
	j.e.GH.RemoveAppKey(j.key)
	j.key = fresh
	return nil
}

// RotateWebhookSecret rotates the webhook secret as docs/labels.md says to: the new value put in
// the stack's secret first, then set in the App's settings.
func (j *Jobs) RotateWebhookSecret(ctx context.Context) error {
	j.Secret = "whsec-" + randomSuffix() + randomSuffix()
	if err := j.e.setSecret(ctx, j.webhookSecretARN, j.Secret); err != nil {
		return err
	}
	j.e.GH.SetWebhook(j.URL, j.Secret)
	return nil
}

// setSecret puts a new value in secret arn (the old one becomes AWSPREVIOUS).
func (e *Env) setSecret(ctx context.Context, arn, value string) error {
	if _, err := secretsmanager.NewFromConfig(e.AWS).PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String(arn),
		SecretString: aws.String(value)}); err != nil {
		return fmt.Errorf("put a new value in secret %s: %w", arn, err)
	}
	return nil
}

// DeadLetters counts the messages on the jobs dead-letter queue.
func (j *Jobs) DeadLetters(ctx context.Context) (int, error) {
	out, err := sqs.NewFromConfig(j.e.AWS).GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &j.JobsDLQURL,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
}

// Pending counts the jobs queue's messages waiting for the dispatcher or being handled (not the
// delayed checks).
func (j *Jobs) Pending(ctx context.Context) int {
	out, err := sqs.NewFromConfig(j.e.AWS).GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &j.JobsQueueURL,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		return -1
	}
	n := 0
	for _, v := range out.Attributes {
		k, _ := strconv.Atoi(v)
		n += k
	}
	return n
}

// HandlerTimes returns the webhook handler's time for each delivery so far.
func (j *Jobs) HandlerTimes() []time.Duration {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.handler)
}

// GitHubTraffic is the dispatcher's transport to the GitHub stand-in: it counts requests by
// method and path pattern, and answers the next requests with a server error on demand (GitHub
// having a bad minute).
type GitHubTraffic struct {
	base  http.RoundTripper
	mu    sync.Mutex
	ops   map[string]int
	fails int
	code  int
}

// RoundTrip counts the request, and fails it while failures are due.
func (g *GitHubTraffic) RoundTrip(r *http.Request) (*http.Response, error) {
	op := r.Method + " " + githubOp(r.URL.Path)
	g.mu.Lock()
	if g.ops == nil {
		g.ops = map[string]int{}
	}
	g.ops[op]++
	fail := g.fails > 0
	if fail {
		g.fails--
	}
	code := g.code
	g.mu.Unlock()
	if fail {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"message":"injected: GitHub is having a bad minute"}`)), Request: r}, nil
	}
	return g.base.RoundTrip(r)
}

// Fail answers the next n requests with HTTP status code.
func (g *GitHubTraffic) Fail(n, code int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fails, g.code = n, code
}

// Take returns the requests counted since the last Take, by operation, and starts again.
func (g *GitHubTraffic) Take() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := g.ops
	g.ops = map[string]int{}
	return out
}

// githubOp names a GitHub API path without its ids: /repos/{owner}/{repo}/actions/runners/{id}.
func githubOp(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "repos":
		parts[1], parts[2] = "{owner}", "{repo}"
	case len(parts) >= 2 && parts[0] == "orgs":
		parts[1] = "{org}"
	}
	for i, p := range parts {
		if _, err := strconv.Atoi(p); err == nil {
			parts[i] = "{id}"
		}
	}
	return "/" + strings.Join(parts, "/")
}
