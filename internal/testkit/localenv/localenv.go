// Package localenv assembles a whole local Hangar world on the emulators, for end-to-end tests,
// benchmarks and the demo: a state table in DynamoDB Local, a pool document in moto's SSM, the
// GitHub stand-in, a download server for the stand-in runner, and a fleet simulator running real
// agents for the instances launched in moto. Tests run the action's step binaries (cmd/provision,
// cmd/release) against it with StepEnv and RunStep; it also does, one transition at a time, what
// the control plane does to an instance (Warm, Claim, Release), for tests that drive the agent
// through states no step binary would produce on cue.
package localenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/google/go-github/v66/github"

	"github.com/hangar-ci/hangar/internal/testkit/fakerunner"
	"github.com/hangar-ci/hangar/internal/testkit/fleetsim"
	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
	"github.com/hangar-ci/hangar/internal/testkit/lambdaemu"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
	"github.com/hangar-ci/hangar/internal/wire/step"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/platform/ghclient"
	"github.com/hangar-ci/hangar/pkg/platform/ghurl"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// Fixed values of the local world.
const (
	AdminToken    = "admin-token"
	RunnerVersion = "2.321.0"
	Repo          = "octo/app"
	Owner         = "octo"         // Repo's owner: the pools allow its repositories
	Account       = "123456789012" // moto's account
	AMI           = "ami-12c6146b" // one of moto's stock images
)

// Options shape the world.
type Options struct {
	Stack       string   // default: hangar-<random>
	Pool        string   // default: linux-x64
	PreRunner   string   // the pool's pre-runner script
	BadChecksum bool     // publish a wrong SHA-256 for the runner download
	Baked       bool     // bake the runner into the "image" instead of downloading it
	AgentArgs   []string // extra agent flags
	// Hide are files the simulated instances' image lacks (fleetsim.Config.Hide).
	Hide   []string
	Market string   // the pool's market (default on-demand)
	Types  []string // the pool's instance types (default c7i.large, c6i.large, m7i.large)
	// Requirements choose the pool's types by size instead (Types is then ignored).
	Requirements *pooldoc.Requirements
	Dir          string // the simulator's directory (default: a temporary one, removed by Close)
	// InstanceCPUShares is the simulated instances' CPU weight together (fleetsim.Config.CPUShares;
	// 0: each process's own, as in tests).
	InstanceCPUShares int
	Log               *slog.Logger
	// TLS serves the GitHub stand-in on https, as GitHub is, with a self-signed certificate that
	// Environ trusts (SSL_CERT_FILE): for steps run inside a workflow, which accept no plain-http
	// GitHub.
	TLS bool
	// GitHub is a GitHub stand-in already serving (ghfake.New or NewTLS), used instead of one of
	// the world's own and closed with it: a Deployed stack's pool documents pin the GitHub server,
	// so the stand-in must be up, and its URL given as the stack's github.serverUrl, before the
	// stack is deployed.
	GitHub *ghfake.Server
	// Deployed attaches the world to the stack named Stack as deployed into the emulators (see
	// internal/testkit/emustack): its table (in moto's DynamoDB), queues, launch templates, key
	// and pool documents, found from the stack's name alone as the steps find them; nothing of
	// the stack is created or changed here. The runner must be Baked (the stack's documents
	// name GitHub's download site), and the pool options above do not apply.
	Deployed bool
}

// Env is a running local world. Close it when done.
type Env struct {
	// handed keeps, per instance, the last token HandOver sent, to answer the agent's asks.
	handedMu sync.Mutex
	handed   map[string]handed
	AWS      aws.Config
	Store    *state.Store
	EC2      *ec2.Client
	GH       *ghfake.Server
	GitHub   *github.Client
	Sim      *fleetsim.Simulator
	Stack    string
	Pool     string
	Table    string
	// TarSum is the real SHA-256 of the runner tarball.
	TarSum string
	// Doc is the pool's published document.
	Doc *pooldoc.Document

	deployed  bool
	ddbURL    string // the DynamoDB endpoint the state table is at
	lambdaURL string // the local Lambda serving the stack's refresh function (ServeRefresh)
	certFile  string // the GitHub stand-in's certificate, when it serves https (Options.TLS)
	closers   []func()
}

// Start builds the agent and the stand-in runner and brings the world up. The emulators must be
// running, with their endpoints in the environment (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_DYNAMODB,
// HANGAR_TESTBED_IMDS_BIN: make testbed-up writes them). On error, what it had created is
// removed again.
func Start(ctx context.Context, o Options) (_ *Env, err error) {
	if o.Pool == "" {
		o.Pool = "linux-x64"
	}
	if o.Stack == "" {
		o.Stack = "hangar-" + randomSuffix()
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	imdsBin := os.Getenv("HANGAR_TESTBED_IMDS_BIN")
	ddbURL := os.Getenv("AWS_ENDPOINT_URL_DYNAMODB")
	if imdsBin == "" || ddbURL == "" {
		return nil, errors.New("the emulators' endpoints are not in the environment (HANGAR_TESTBED_IMDS_BIN, AWS_ENDPOINT_URL_DYNAMODB): run make testbed-up and load .cache/testbed/endpoints.env")
	}
	if !ghurl.LocalWorld && !o.TLS && (o.GitHub == nil || !strings.HasPrefix(o.GitHub.URL(), "https:")) {
		return nil, errors.New("the local world's GitHub stand-in serves plain http on a loopback address, which only a local world build accepts: build with -tags localworld (go test -tags localworld; the Makefile's test targets do)")
	}
	if o.Deployed && o.Stack == "" {
		return nil, errors.New("a world on a deployed stack needs the stack's name")
	}
	if o.Deployed {
		// CloudFormation made the table in the same emulator as everything else.
		if ddbURL = os.Getenv("AWS_ENDPOINT_URL"); ddbURL == "" || !o.Baked {
			return nil, errors.New("a world on a deployed stack needs AWS_ENDPOINT_URL (the emulator it was deployed into) and a Baked runner")
		}
	}
	agentBin, err := testbuild.Build("github.com/hangar-ci/hangar/cmd/agent")
	if err != nil {
		return nil, fmt.Errorf("build the agent: %w", err)
	}
	helperBin, err := testbuild.Build("github.com/hangar-ci/hangar/cmd/agent/runas")
	if err != nil {
		return nil, fmt.Errorf("build the agent's helper: %w", err)
	}
	runnerBin, err := testbuild.Build("github.com/hangar-ci/hangar/internal/testkit/cmd/fake-runner")
	if err != nil {
		return nil, fmt.Errorf("build the stand-in runner: %w", err)
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("load AWS config: %w", err)
	}
	// e is not the named result: a failed return sets that to nil before the deferred Close runs.
	e := &Env{AWS: cfg, EC2: ec2.NewFromConfig(cfg), Stack: o.Stack, Pool: o.Pool, Table: state.TableName(o.Stack), deployed: o.Deployed, ddbURL: ddbURL}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()

	db := e.DynamoDB()
	if o.Deployed {
		if err := e.attach(ctx); err != nil {
			return nil, err
		}
	} else if err := e.createTable(ctx, db); err != nil {
		return nil, err
	}
	account := state.Account{Partition: "aws", Region: cfg.Region, ID: Account}
	if e.Doc != nil {
		account = e.Doc.StateAccount()
	}
	if e.Store, err = state.NewStore(db, e.Table, account); err != nil {
		return nil, fmt.Errorf("open state store: %w", err)
	}

	switch {
	case o.GitHub != nil:
		e.GH = o.GitHub
	case o.TLS:
		e.GH = ghfake.NewTLS(AdminToken)
	default:
		e.GH = ghfake.New(AdminToken)
	}
	e.closers = append(e.closers, e.GH.Close)
	if strings.HasPrefix(e.GH.URL(), "https:") {
		if e.certFile, err = e.trustGitHub(); err != nil {
			return nil, err
		}
	}
	if e.Doc != nil && !ghurl.SameServer(e.GH.URL(), e.Doc.GitHubURL) {
		return nil, fmt.Errorf("the deployed stack's pool %s pins the GitHub server %s, not the stand-in at %s: deploy it with github.serverUrl set to the stand-in's URL and pass the stand-in as Options.GitHub",
			e.Pool, e.Doc.GitHubURL, e.GH.URL())
	}
	if e.GitHub, err = github.NewClient(e.GH.HTTPClient()).WithAuthToken(AdminToken).WithEnterpriseURLs(e.GH.URL()+"/", e.GH.URL()+"/"); err != nil {
		return nil, fmt.Errorf("GitHub client for the stand-in: %w", err)
	}
	e.GitHub.BaseURL.Path = "/"

	if !o.Deployed {
		url, sum, err := e.serveRunner(runnerBin)
		if err != nil {
			return nil, err
		}
		if o.BadChecksum {
			sum = strings.Repeat("0", 64)
		}
		if err := e.publishPool(ctx, o, url, sum); err != nil {
			return nil, fmt.Errorf("publish pool %s: %w", e.Pool, err)
		}
	}

	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "hangar-fleet-"); err != nil {
			return nil, fmt.Errorf("simulator directory: %w", err)
		}
		e.closers = append(e.closers, func() { _ = os.RemoveAll(dir) })
	}
	simCfg := fleetsim.Config{
		Stack: e.Stack, AgentBin: agentBin, HelperBin: helperBin, MetadataBin: imdsBin, Dir: dir, Env: e.Environ(), DynamoDBEndpoint: ddbURL,
		Region: cfg.Region, Account: Account, AgentArgs: o.AgentArgs, Log: o.Log, CPUShares: o.InstanceCPUShares, Hide: o.Hide,
	}
	if o.Baked {
		simCfg.Prepare = func(_, dir string) error { return fakerunner.Install(dir, runnerBin) }
	}
	if e.Sim, err = fleetsim.New(simCfg, e.EC2); err != nil {
		return nil, err
	}
	simCtx, stopSim := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = e.Sim.Run(simCtx); close(done) }()
	e.closers = append(e.closers, func() { stopSim(); <-done })
	return e, nil
}

// createTable creates the state table (removed again by Close), as the stack does.
func (e *Env) createTable(ctx context.Context, db *dynamodb.Client) error {
	if err := testbed.CreateTable(ctx, db, e.Table); err != nil {
		return fmt.Errorf("create state table %s: %w", e.Table, err)
	}
	e.closers = append(e.closers, func() {
		_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &e.Table})
	})
	return nil
}

// serveRunner serves the stand-in runner's tarball where the pool document's runner.baseUrl
// says releases are, and returns that base URL and the tarball's SHA-256 (also kept in TarSum).
func (e *Env) serveRunner(runnerBin string) (string, string, error) {
	tarball, sum, err := fakerunner.Tarball(runnerBin)
	if err != nil {
		return "", "", fmt.Errorf("pack the stand-in runner: %w", err)
	}
	e.TarSum = sum
	dl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != fmt.Sprintf("/v%s/actions-runner-linux-x64-%s.tar.gz", RunnerVersion, RunnerVersion) {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(tarball)
	}))
	e.closers = append(e.closers, dl.Close)
	return dl.URL, sum, nil
}

// attach finds the deployed stack's pool o.Pool, as the steps do from the stack's name.
func (e *Env) attach(ctx context.Context) error {
	st, err := pooldoc.LoadStack(ctx, ssm.NewFromConfig(e.AWS), e.Stack)
	if err != nil {
		return fmt.Errorf("attach to the deployed stack: %w", err)
	}
	for _, d := range st.Pools {
		if d.Name == e.Pool {
			e.Doc, e.Table = d, d.Table
			return nil
		}
	}
	return fmt.Errorf("attach to the deployed stack %s: no pool %q", e.Stack, e.Pool)
}

// DynamoDB returns a client of the DynamoDB the state table is in.
func (e *Env) DynamoDB() *dynamodb.Client {
	return dynamodb.NewFromConfig(e.AWS, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(e.ddbURL)
		o.DisableValidateResponseChecksum = true // DynamoDB Local's errors carry no CRC32
	})
}

// Environ is the environment of the processes that play Hangar's parts (steps, refresh,
// agents): this process's, with the state table's DynamoDB endpoint.
func (e *Env) Environ() []string {
	env := append(os.Environ(), "AWS_ENDPOINT_URL_DYNAMODB="+e.ddbURL)
	if e.lambdaURL != "" {
		env = append(env, "AWS_ENDPOINT_URL_LAMBDA="+e.lambdaURL)
	}
	if e.certFile != "" {
		env = append(env, "SSL_CERT_FILE="+e.certFile)
	}
	return env
}

// trustGitHub writes the certificate of the GitHub stand-in, which serves https, to a file, whose
// path it returns.
func (e *Env) trustGitHub() (string, error) {
	dir, err := os.MkdirTemp("", "hangar-github-")
	if err != nil {
		return "", err
	}
	e.closers = append(e.closers, func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "cert.pem")
	return path, e.GH.CertFile(path)
}

// ServeRefresh runs the stack's refresh function (bootstrap, cmd/refresh) in a local Lambda
// under the name the stack gives it, with the environment the stack gives it (HANGAR_STACK);
// from then on Environ points Lambda calls at it, so the action's refresh mode invokes it as it
// would the deployed function. Close stops it.
func (e *Env) ServeRefresh(bootstrap string) (*lambdaemu.Emulator, error) {
	fn, err := lambdaemu.Start(lambdaemu.Function{Name: pooldoc.RefreshFunction(e.Stack), Bootstrap: bootstrap,
		Env: append(e.Environ(), "HANGAR_STACK="+e.Stack), Timeout: 2 * time.Minute})
	if err != nil {
		return nil, err
	}
	e.lambdaURL = fn.URL()
	e.closers = append(e.closers, fn.Close)
	return fn, nil
}

// publishPool creates the pool's queue and launch template in moto, as the stack does, and
// publishes its document.
func (e *Env) publishPool(ctx context.Context, o Options, runnerURL, sum string) error {
	queueURL, dlqURL, template, err := e.poolResources(ctx, e.Pool)
	if err != nil {
		return err
	}
	subnets, err := DefaultSubnets(ctx, e.EC2)
	if err != nil {
		return err
	}
	market := o.Market
	if market == "" {
		market = pooldoc.MarketOnDemand
	}
	types := o.Types
	if o.Requirements != nil {
		types = nil
	} else if len(types) == 0 {
		types = []string{"c7i.large", "c6i.large", "m7i.large"}
	}
	e.Doc, err = e.putDocument(ctx, pooldoc.Document{
		SchemaVersion: pooldoc.SchemaVersion, Name: e.Pool, Region: e.AWS.Region, Account: Account, Table: e.Table, GitHubURL: e.GH.URL(),
		QueueURL: queueURL, DeadLetterQueueURL: dlqURL,
		LaunchTemplate: pooldoc.LaunchTemplate{ID: template, Version: "1"},
		SpecHash:       "local", InstanceTypes: types, InstanceRequirements: o.Requirements, Subnets: subnets, Market: market, Labels: []string{"linux"},
		AllowedRepositories: []string{Owner + "/*"},
		Runner:              pooldoc.Runner{Version: RunnerVersion, BaseURL: runnerURL, SHA256: map[string]string{"x64": sum}, PreRunnerScript: o.PreRunner},
	}, true)
	return err
}

// AddPool publishes a second pool of the stack, like the first but with its own queue and
// launch template, and returns its document.
func (e *Env) AddPool(ctx context.Context, name string) (*pooldoc.Document, error) {
	if e.deployed {
		return nil, errDeployed
	}
	queueURL, dlqURL, template, err := e.poolResources(ctx, name)
	if err != nil {
		return nil, err
	}
	doc := *e.Doc
	doc.Name, doc.QueueURL, doc.DeadLetterQueueURL = name, queueURL, dlqURL
	doc.LaunchTemplate = pooldoc.LaunchTemplate{ID: template, Version: "1"}
	return e.putDocument(ctx, doc, true)
}

// UpdatePool changes the pool's document and republishes it, as a redeploy of the stack would.
func (e *Env) UpdatePool(ctx context.Context, change func(*pooldoc.Document)) error {
	if e.deployed {
		return errDeployed
	}
	change(e.Doc)
	_, err := e.putDocument(ctx, *e.Doc, false)
	return err
}

// errDeployed refuses to change a deployed stack's pools behind its back.
var errDeployed = errors.New("the pools of a deployed stack change by redeploying it")

// poolResources creates a pool's queue, dead-letter queue and launch template, as the stack does.
func (e *Env) poolResources(ctx context.Context, pool string) (queueURL, dlqURL, template string, err error) {
	if queueURL, dlqURL, err = e.createQueues(ctx, e.Stack+"-"+pool); err != nil {
		return "", "", "", err
	}
	lt, err := e.EC2.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: aws.String(e.Stack + "-" + pool),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: aws.String(AMI), InstanceType: ec2types.InstanceTypeC7iLarge}})
	if err != nil {
		return "", "", "", fmt.Errorf("create launch template: %w", err)
	}
	e.closers = append(e.closers, func() {
		_, _ = e.EC2.DeleteLaunchTemplate(context.Background(), &ec2.DeleteLaunchTemplateInput{LaunchTemplateId: lt.LaunchTemplate.LaunchTemplateId})
	})
	return queueURL, dlqURL, aws.ToString(lt.LaunchTemplate.LaunchTemplateId), nil
}

// putDocument checks a pool document as the steps read it and publishes it (new: removed again
// by Close), returning it as parsed.
func (e *Env) putDocument(ctx context.Context, doc pooldoc.Document, isNew bool) (*pooldoc.Document, error) {
	body, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encode pool document %s: %w", doc.Name, err)
	}
	parsed, err := pooldoc.Parse(body)
	if err != nil {
		return nil, fmt.Errorf("local pool document: %w", err)
	}
	name := pooldoc.ParameterName(e.Stack, doc.Name)
	client := ssm.NewFromConfig(e.AWS)
	if _, err := client.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(name),
		Value: aws.String(string(body)), Type: ssmtypes.ParameterTypeString, Overwrite: aws.Bool(true)}); err != nil {
		return nil, fmt.Errorf("put parameter %s: %w", name, err)
	}
	if isNew {
		e.closers = append(e.closers, func() {
			_, _ = client.DeleteParameter(context.Background(), &ssm.DeleteParameterInput{Name: aws.String(name)})
		})
	}
	return parsed, nil
}

// createQueues makes a pool queue with its dead-letter queue, as the stack does.
func (e *Env) createQueues(ctx context.Context, name string) (string, string, error) {
	client := sqs.NewFromConfig(e.AWS)
	dlq, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq")})
	if err != nil {
		return "", "", fmt.Errorf("create queue: %w", err)
	}
	e.closers = append(e.closers, func() {
		_, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: dlq.QueueUrl})
	})
	attrs, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		return "", "", fmt.Errorf("dead-letter queue ARN: %w", err)
	}
	redrive, _ := json.Marshal(map[string]string{"deadLetterTargetArn": attrs.Attributes["QueueArn"], "maxReceiveCount": "50"})
	q, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{"RedrivePolicy": string(redrive)}})
	if err != nil {
		return "", "", fmt.Errorf("create queue: %w", err)
	}
	e.closers = append(e.closers, func() {
		_, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl})
	})
	return aws.ToString(q.QueueUrl), aws.ToString(dlq.QueueUrl), nil
}

// DefaultSubnets returns two subnets of the emulator's default VPC in different zones, sorted
// by zone: where the local world's pools launch.
func DefaultSubnets(ctx context.Context, client *ec2.Client) ([]pooldoc.Subnet, error) {
	out, err := client.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{{Name: aws.String("default-for-az"), Values: []string{"true"}}}})
	if err != nil {
		return nil, fmt.Errorf("describe subnets: %w", err)
	}
	var subnets []pooldoc.Subnet
	seen := map[string]bool{}
	for _, s := range out.Subnets {
		az := aws.ToString(s.AvailabilityZone)
		if !seen[az] && len(subnets) < 2 {
			seen[az] = true
			subnets = append(subnets, pooldoc.Subnet{ID: aws.ToString(s.SubnetId), AZ: az})
		}
	}
	slices.SortFunc(subnets, func(a, b pooldoc.Subnet) int { return strings.Compare(a.AZ, b.AZ) })
	if len(subnets) == 0 {
		return nil, errors.New("moto has no default subnets")
	}
	return subnets, nil
}

// DefaultVPC is the id of the emulator's default VPC, that of DefaultSubnets.
func DefaultVPC(ctx context.Context, client *ec2.Client) (string, error) {
	out, err := client.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{Filters: []ec2types.Filter{{Name: aws.String("is-default"), Values: []string{"true"}}}})
	if err != nil {
		return "", fmt.Errorf("describe the default VPC: %w", err)
	}
	if len(out.Vpcs) == 0 {
		return "", errors.New("moto has no default VPC")
	}
	return aws.ToString(out.Vpcs[0].VpcId), nil
}

// Wiring returns the steps' wiring for the local world; ec2Client replaces the EC2 client when
// set (fault injection).
func (e *Env) Wiring(ec2Client awsapi.EC2, log *slog.Logger) (*step.Wiring, error) {
	owner, name, _ := strings.Cut(Repo, "/")
	gh, err := ghclient.New(e.GH.URL(), AdminToken, ghapi.Scope{Owner: owner, Repo: name})
	if err != nil {
		return nil, err
	}
	clients := &step.Clients{AWS: e.AWS, DynamoDB: e.DynamoDB(), EC2: e.EC2, SQS: sqs.NewFromConfig(e.AWS), SSM: ssm.NewFromConfig(e.AWS)}
	return &step.Wiring{Clients: clients, EC2: ec2Client, Stack: e.Stack, GitHub: gh, Log: log}, nil
}

// Close stops the simulator and the servers and removes what Start created.
func (e *Env) Close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	e.closers = nil
}

// RunnerURL is the URL runners of the local repository register with.
func (e *Env) RunnerURL() string { return e.GH.URL() + "/" + Repo }

// Launch starts an instance in moto and writes its item (created, no run, deadline in ten minutes
// unless given), as refresh does for a warm pool.
func (e *Env) Launch(ctx context.Context, deadline time.Time) (string, error) {
	out, err := e.EC2.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String(AMI), MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		InstanceType: ec2types.InstanceTypeC7iLarge, TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance,
			Tags: []ec2types.Tag{{Key: aws.String(fleet.TagStack), Value: &e.Stack}, {Key: aws.String(fleet.TagPool), Value: &e.Pool}}}}})
	if err != nil {
		return "", fmt.Errorf("launch: %w", err)
	}
	id := aws.ToString(out.Instances[0].InstanceId)
	if deadline.IsZero() {
		deadline = time.Now().Add(10 * time.Minute)
	}
	bells, err := e.Bells()
	if err != nil {
		return "", err
	}
	err = e.Store.Create(ctx, []*state.Instance{{ID: id, Pool: e.Pool, Threshold: deadline, Bell: bells.URL(id), Home: e.Doc.Home(),
		Spec: state.Spec{InstanceType: "c7i.large", UsageClass: state.UsageOnDemand, AZ: "us-east-1a", VCPU: 2, MemoryMiB: 4096}}})
	if err != nil {
		return id, err
	}
	return id, bells.Create(ctx, map[string]string{id: e.Store.Account().ARN(id)})
}

// Bells returns the stack's doorbells, as the control plane makes and rings them.
func (e *Env) Bells() (*doorbell.Bells, error) {
	return doorbell.New(sqs.NewFromConfig(e.AWS), e.Stack, e.Doc.QueueURL)
}

// transitionAndRing applies a change and rings the instance's doorbell, as provision and release
// do after the writes an agent waits for.
func (e *Env) transitionAndRing(ctx context.Context, c state.Change) (*state.Instance, error) {
	out, err := e.Transition(ctx, c)
	if err != nil {
		return nil, err
	}
	return out, e.Ring(ctx, out)
}

// Ring rings the instance's doorbell, as the control plane does after a write its agent waits
// for (a test that writes such a change itself rings after it).
func (e *Env) Ring(ctx context.Context, in *state.Instance) error {
	bells, err := e.Bells()
	if err != nil {
		return err
	}
	return bells.Ring(ctx, in.Bell)
}

// WaitItem polls an item until cond holds, or timeout. Meanwhile it answers the agent's asks for a
// token HandOver sent, as provision's wait does (an agent stopped or restarted after receiving
// its hand-over asks again).
func (e *Env) WaitItem(ctx context.Context, id string, timeout time.Duration, what string, cond func(*state.Instance) bool) (*state.Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	var last *state.Instance
	for {
		if in, err := e.Store.Get(ctx, id); err == nil {
			last = in
			if cond(in) {
				return in, nil
			}
			e.answerAsk(ctx, in)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: not within %s; item: %+v\nagent log:\n%s", what, timeout, last, e.Sim.AgentLog(id))
		case <-t.C:
		}
	}
}

// WaitSignal waits for a signal about run, written for minVersion or later.
func (e *Env) WaitSignal(ctx context.Context, id string, name state.SignalName, run string, minVersion int64) (*state.Instance, error) {
	return e.WaitItem(ctx, id, 30*time.Second, fmt.Sprintf("signal %s for run %q", name, run), func(in *state.Instance) bool {
		return in.SignalFor(name, run, minVersion)
	})
}

// Transition applies a change in the local pool (a deadline ten minutes out unless given).
func (e *Env) Transition(ctx context.Context, c state.Change) (*state.Instance, error) {
	if c.Threshold.IsZero() && c.To != state.Terminated {
		c.Threshold = time.Now().Add(10 * time.Minute)
	}
	c.Pool = e.Pool
	return e.Store.Transition(ctx, c)
}

// Warm waits for READY and moves the instance to idle, as refresh does.
func (e *Env) Warm(ctx context.Context, id string) (*state.Instance, error) {
	in, err := e.WaitSignal(ctx, id, state.SignalReady, "", 1)
	if err != nil {
		return nil, err
	}
	return e.Transition(ctx, state.Change{InstanceID: id, From: state.Created, To: state.Idle, Version: in.Version})
}

// Claim gives an idle instance to run with a fresh registration token, and rings it, as provision
// does.
func (e *Env) Claim(ctx context.Context, in *state.Instance, run string) (*state.Instance, error) {
	owner, name, _ := strings.Cut(Repo, "/")
	tok, _, err := e.GitHub.Actions.CreateRegistrationToken(ctx, owner, name)
	if err != nil {
		return nil, err
	}
	home := e.Doc.Home() // as provision's claim writes it
	out, err := e.Transition(ctx, state.Change{InstanceID: in.ID, From: in.State, To: state.Claimed, Version: in.Version,
		Assign: &state.Assignment{RunID: run, RunAttempt: 1, Repo: Repo, RunnerURL: e.RunnerURL(), RunnerPrefix: e.RunnerNames().Prefix(),
			HandOverSum: state.SecretSum(tok.GetToken())}, Home: &home})
	if err != nil {
		return nil, err
	}
	return out, e.HandOver(ctx, out, tok.GetToken())
}

// handed is a token HandOver sent, kept to answer the agent's asks as provision does.
type handed struct {
	run      string
	version  int64
	token    string
	answered int
}

// answerAsk hands the token over again when the instance's agent asked for it since the last
// answer (it restarted, or was stopped, after receiving it), as provision's wait does.
func (e *Env) answerAsk(ctx context.Context, in *state.Instance) {
	e.handedMu.Lock()
	h, ok := e.handed[in.ID]
	if !ok || in.AskVersion != h.version || in.RunID != h.run || in.Asks <= h.answered {
		e.handedMu.Unlock()
		return
	}
	h.answered = in.Asks
	e.handed[in.ID] = h
	e.handedMu.Unlock()
	_ = e.HandOver(ctx, in, h.token)
}

// HandOver sends a runner registration token to the instance's doorbell for the assignment in
// holds (its run and version), as provision does right after a claim: the hand-over rings too.
func (e *Env) HandOver(ctx context.Context, in *state.Instance, token string) error {
	bells, err := e.Bells()
	if err != nil {
		return err
	}
	e.handedMu.Lock()
	if e.handed == nil {
		e.handed = map[string]handed{}
	}
	if h := e.handed[in.ID]; h.run != in.RunID || h.version != in.Version {
		e.handed[in.ID] = handed{run: in.RunID, version: in.Version, token: token}
	}
	e.handedMu.Unlock()
	return bells.HandOver(ctx, doorbell.Delivery{URL: bells.URL(in.ID), ARN: e.Store.Account().ARN(in.ID), HandOver: doorbell.HandOver{Run: in.RunID, Version: in.Version,
		Kind: doorbell.KindRegistration, Secret: token}})
}

// RunnerNames returns the names of the stack's runners.
func (e *Env) RunnerNames() state.RunnerNames { return state.RunnerNamesOf(e.Stack) }

// Release gives the instance back, rings it, and deletes the run's runner through the API, as
// release does (instances get no remove token).
func (e *Env) Release(ctx context.Context, in *state.Instance) (*state.Instance, error) {
	out, err := e.transitionAndRing(ctx, state.Change{InstanceID: in.ID, From: in.State, To: state.Idle, Version: in.Version, RunID: in.RunID})
	if err != nil {
		return nil, err
	}
	owner, name, _ := strings.Cut(Repo, "/")
	runners, _, err := e.GitHub.Actions.ListRunners(ctx, owner, name, nil)
	if err != nil {
		return nil, fmt.Errorf("list the repository's runners: %w", err)
	}
	for _, r := range runners.Runners {
		if r.GetName() == e.RunnerNames().Name(in.ID, in.RunID) {
			if _, err := e.GitHub.Actions.RemoveRunner(ctx, owner, name, r.GetID()); err != nil {
				return nil, fmt.Errorf("delete the run's runner %s: %w", r.GetName(), err)
			}
		}
	}
	return out, nil
}

// InstanceState returns an instance's state in EC2.
func (e *Env) InstanceState(ctx context.Context, id string) (ec2types.InstanceStateName, error) {
	out, err := e.EC2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		return "", err
	}
	return out.Reservations[0].Instances[0].State.Name, nil
}
