package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/google/go-github/v66/github"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/fakerunner"
	"github.com/hangar-ci/hangar/internal/fleetsim"
	"github.com/hangar-ci/hangar/internal/ghfake"
	"github.com/hangar-ci/hangar/internal/testbed"
	"github.com/hangar-ci/hangar/internal/testbuild"
	"github.com/hangar-ci/hangar/pkg/poolconfig"
	"github.com/hangar-ci/hangar/pkg/state"
)

const (
	adminToken    = "admin-token"
	runnerVersion = "2.321.0"
	repo          = "octo/app"
)

// env is one test's world: table, pool document, GitHub stand-in, runner download and a fleet
// simulator running real agents.
type env struct {
	t      *testing.T
	ctx    context.Context
	store  *state.Store
	ec2    *ec2.Client
	gh     *ghfake.Server
	ghc    *github.Client
	sim    *fleetsim.Simulator
	stack  string
	pool   string
	tarSum string
}

type envOptions struct {
	preRunner   string   // the pool's pre-runner script
	badChecksum bool     // publish a wrong SHA-256 for the runner download
	baked       bool     // bake the runner into the "image" instead of downloading it
	agentArgs   []string // extra agent flags
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	testbed.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	cfg := testbed.AWSConfig(t)
	e := &env{t: t, ctx: ctx, ec2: ec2.NewFromConfig(cfg), stack: testbed.Name(t, "agent"), pool: "linux-x64"}

	db := testbed.DynamoDB(t)
	table := testbed.Name(t, "hangar-agent")
	require.NoError(t, state.CreateTable(ctx, db, table))
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	var err error
	e.store, err = state.NewStore(db, table, state.Account{Partition: "aws", Region: testbed.Region(), ID: testbed.Account})
	require.NoError(t, err)

	e.gh = ghfake.New(adminToken)
	t.Cleanup(e.gh.Close)
	e.ghc, err = github.NewClient(nil).WithAuthToken(adminToken).WithEnterpriseURLs(e.gh.URL()+"/", e.gh.URL()+"/")
	require.NoError(t, err)
	e.ghc.BaseURL.Path = "/"

	runnerBin := testbuild.Binary(t, "github.com/hangar-ci/hangar/internal/cmd/fake-runner")
	tarball, sum, err := fakerunner.Tarball(runnerBin)
	require.NoError(t, err)
	e.tarSum = sum
	dl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != fmt.Sprintf("/v%s/actions-runner-linux-x64-%s.tar.gz", runnerVersion, runnerVersion) {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(tarball)
	}))
	t.Cleanup(dl.Close)
	if o.badChecksum {
		sum = strings.Repeat("0", 64)
	}

	doc := poolconfig.Document{
		SchemaVersion: 1, Name: e.pool, Region: testbed.Region(), Account: testbed.Account, Table: table,
		QueueURL: "http://127.0.0.1:5000/123456789012/unused", LaunchTemplate: poolconfig.LaunchTemplate{ID: "lt-0123456789abcdef0", Version: "1"},
		SpecHash: "test", InstanceTypes: []string{"c7i.large"}, Subnets: []poolconfig.Subnet{{ID: "subnet-0123456789abcdef0", AZ: "us-east-1a"}},
		Market: poolconfig.MarketOnDemand, Labels: []string{"linux"},
		Runner: poolconfig.Runner{Version: runnerVersion, BaseURL: dl.URL, SHA256: map[string]string{"x64": sum}, PreRunnerScript: o.preRunner},
	}
	body, err := json.Marshal(doc)
	require.NoError(t, err)
	_, err = poolconfig.Parse(body) // the document must be one the agent accepts
	require.NoError(t, err)
	_, err = ssm.NewFromConfig(cfg).PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(poolconfig.ParameterName(e.stack, e.pool)),
		Value: aws.String(string(body)), Type: ssmtypes.ParameterTypeString, Overwrite: aws.Bool(true)})
	require.NoError(t, err)

	simCfg := fleetsim.Config{
		Stack: e.stack, AgentBin: testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/agent"),
		MetadataBin: metadataBin(t), Dir: t.TempDir(), Env: os.Environ(), DynamoDBEndpoint: os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"),
		Region: testbed.Region(), Account: testbed.Account,
		AgentArgs: append([]string{"--poll-interval", "250ms", "--spot-interval", "250ms"}, o.agentArgs...),
	}
	if o.baked {
		simCfg.Prepare = func(_, dir string) error { return fakerunner.Install(dir, runnerBin) }
	}
	e.sim, err = fleetsim.New(simCfg, e.ec2)
	require.NoError(t, err)
	simCtx, stopSim := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = e.sim.Run(simCtx); close(done) }()
	t.Cleanup(func() {
		stopSim()
		<-done
		if t.Failed() {
			for _, id := range e.sim.Running() {
				t.Logf("agent log of %s:\n%s", id, e.sim.AgentLog(id))
			}
		}
	})
	return e
}

func metadataBin(t *testing.T) string {
	t.Helper()
	p := os.Getenv("HANGAR_TESTBED_IMDS_BIN")
	if p == "" {
		t.Fatal("HANGAR_TESTBED_IMDS_BIN is not set: start the test bed with make testbed-up (make test does)")
	}
	return p
}

// launch starts an instance in moto and writes its item (created, no run, deadline in ten
// minutes unless given), as refresh does for a warm pool.
func (e *env) launch(deadline time.Time) string {
	e.t.Helper()
	out, err := e.ec2.RunInstances(e.ctx, &ec2.RunInstancesInput{ImageId: aws.String("ami-12c6146b"), MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		InstanceType: ec2types.InstanceTypeC7iLarge, TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance,
			Tags: []ec2types.Tag{{Key: aws.String(fleetsim.TagStack), Value: &e.stack}, {Key: aws.String(fleetsim.TagPool), Value: &e.pool}}}}})
	require.NoError(e.t, err)
	id := aws.ToString(out.Instances[0].InstanceId)
	if deadline.IsZero() {
		deadline = time.Now().Add(10 * time.Minute)
	}
	require.NoError(e.t, e.store.Create(e.ctx, []*state.Instance{{ID: id, Pool: e.pool, Threshold: deadline,
		Spec: state.Spec{InstanceType: "c7i.large", UsageClass: state.UsageOnDemand, AZ: "us-east-1a", VCPU: 2, MemoryMiB: 4096}}}))
	return id
}

// waitItem polls the item until cond holds.
func (e *env) waitItem(id string, timeout time.Duration, what string, cond func(*state.Instance) bool) *state.Instance {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var last *state.Instance
	for time.Now().Before(deadline) {
		in, err := e.store.Get(e.ctx, id)
		if err == nil {
			last = in
			if cond(in) {
				return in
			}
		}
		select {
		case <-e.ctx.Done():
			e.t.Fatalf("%s: %v", what, e.ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	e.t.Fatalf("%s: not within %s; item: %+v\nagent log:\n%s", what, timeout, last, e.sim.AgentLog(id))
	return nil
}

func (e *env) waitSignal(id string, name state.SignalName, run string, minVersion int64) *state.Instance {
	e.t.Helper()
	return e.waitItem(id, 30*time.Second, fmt.Sprintf("signal %s for run %q", name, run), func(in *state.Instance) bool {
		return in.SignalFor(name, run, minVersion)
	})
}

func (e *env) transition(c state.Change) *state.Instance {
	e.t.Helper()
	if c.Threshold.IsZero() && c.To != state.Terminated {
		c.Threshold = time.Now().Add(10 * time.Minute)
	}
	c.Pool = e.pool
	in, err := e.store.Transition(e.ctx, c)
	require.NoError(e.t, err)
	return in
}

// warm waits for READY and moves the instance to idle, as refresh does.
func (e *env) warm(id string) *state.Instance {
	e.t.Helper()
	in := e.waitSignal(id, state.SignalReady, "", 1)
	return e.transition(state.Change{InstanceID: id, From: state.Created, To: state.Idle, Version: in.Version})
}

// claim gives an idle instance to run, with a fresh registration token, as provision does.
func (e *env) claim(in *state.Instance, run string) *state.Instance {
	e.t.Helper()
	tok, _, err := e.ghc.Actions.CreateRegistrationToken(e.ctx, "octo", "app")
	require.NoError(e.t, err)
	return e.transition(state.Change{InstanceID: in.ID, From: in.State, To: state.Claimed, Version: in.Version,
		Assign: &state.Assignment{RunID: run, RunAttempt: 1, Repo: repo, RunnerURL: e.gh.URL() + "/" + repo,
			RegToken: tok.GetToken(), RegTokenExpiresAt: tok.GetExpiresAt().Time}})
}

// release gives the instance back with a remove token, as release does.
func (e *env) release(in *state.Instance) *state.Instance {
	e.t.Helper()
	tok, _, err := e.ghc.Actions.CreateRemoveToken(e.ctx, "octo", "app")
	require.NoError(e.t, err)
	return e.transition(state.Change{InstanceID: in.ID, From: in.State, To: state.Idle, Version: in.Version, RunID: in.RunID,
		RemoveToken: tok.GetToken()})
}

// instanceState returns the instance's state in EC2.
func (e *env) instanceState(id string) ec2types.InstanceStateName {
	e.t.Helper()
	out, err := e.ec2.DescribeInstances(e.ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	require.NoError(e.t, err)
	return out.Reservations[0].Instances[0].State.Name
}
