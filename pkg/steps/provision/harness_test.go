package provision_test

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/internal/wire/step"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
	"github.com/hangar-ci/hangar/pkg/steps/release"
)

// countingEC2 wraps the real (moto) EC2 client, counting calls and injecting capacity errors for
// chosen (type, zone) pairs or everywhere: fault injection on top of the emulator.
type countingEC2 struct {
	awsapi.EC2
	calls     sync.Map // operation → *atomic.Int64
	mu        sync.Mutex
	noCap     map[string]bool // "type/az" or "*" with no capacity
	subnetAZ  map[string]string
	fleetReqs []*ec2.CreateFleetInput
	partial   int  // when > 0, the next CreateFleet launches at most this many
	spotOut   bool // no spot capacity anywhere
}

func (c *countingEC2) count(op string) {
	v, _ := c.calls.LoadOrStore(op, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (c *countingEC2) Calls(op string) int64 {
	if v, ok := c.calls.Load(op); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

func (c *countingEC2) Total() int64 {
	var n int64
	c.calls.Range(func(_, v any) bool { n += v.(*atomic.Int64).Load(); return true })
	return n
}

// CreateFleet drops the overrides that have no capacity, reporting an
// InsufficientInstanceCapacity error for each, as EC2 does per override in an instant fleet.
func (c *countingEC2) CreateFleet(ctx context.Context, in *ec2.CreateFleetInput, o ...func(*ec2.Options)) (*ec2.CreateFleetOutput, error) {
	c.count("CreateFleet")
	c.mu.Lock()
	c.fleetReqs = append(c.fleetReqs, in)
	noCap := c.noCap
	partial := c.partial
	c.partial = 0
	c.mu.Unlock()
	var keep []ec2types.FleetLaunchTemplateOverridesRequest
	var errs []ec2types.CreateFleetError
	c.mu.Lock()
	spotOut := c.spotOut && in.TargetCapacitySpecification.DefaultTargetCapacityType == ec2types.DefaultTargetCapacityTypeSpot
	c.mu.Unlock()
	for _, ov := range in.LaunchTemplateConfigs[0].Overrides {
		az := c.subnetAZ[aws.ToString(ov.SubnetId)]
		if spotOut || noCap["*"] || noCap[string(ov.InstanceType)+"/"+az] || noCap[string(ov.InstanceType)+"/*"] {
			errs = append(errs, ec2types.CreateFleetError{ErrorCode: aws.String("InsufficientInstanceCapacity"),
				ErrorMessage: aws.String("We currently do not have sufficient " + string(ov.InstanceType) + " capacity in " + az),
				LaunchTemplateAndOverrides: &ec2types.LaunchTemplateAndOverridesResponse{Overrides: &ec2types.FleetLaunchTemplateOverrides{
					InstanceType: ov.InstanceType, SubnetId: ov.SubnetId}}})
			continue
		}
		keep = append(keep, ov)
	}
	if len(keep) == 0 {
		return &ec2.CreateFleetOutput{Errors: errs}, nil
	}
	cp := *in
	cfgs := slices.Clone(in.LaunchTemplateConfigs)
	cfgs[0].Overrides = keep
	cp.LaunchTemplateConfigs = cfgs
	if want := aws.ToInt32(in.TargetCapacitySpecification.TotalTargetCapacity); partial > 0 && int(want) > partial {
		spec := *in.TargetCapacitySpecification
		spec.TotalTargetCapacity = aws.Int32(int32(partial))
		cp.TargetCapacitySpecification = &spec
		first := keep[0]
		errs = append(errs, ec2types.CreateFleetError{ErrorCode: aws.String("InsufficientInstanceCapacity"),
			ErrorMessage: aws.String("partial fulfilment"),
			LaunchTemplateAndOverrides: &ec2types.LaunchTemplateAndOverridesResponse{Overrides: &ec2types.FleetLaunchTemplateOverrides{
				InstanceType: first.InstanceType, SubnetId: first.SubnetId}}})
	}
	out, err := c.EC2.CreateFleet(ctx, &cp, o...)
	if err == nil {
		out.Errors = append(out.Errors, errs...)
	}
	return out, err
}

func (c *countingEC2) DescribeInstanceTypes(ctx context.Context, in *ec2.DescribeInstanceTypesInput, o ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error) {
	c.count("DescribeInstanceTypes")
	return c.EC2.DescribeInstanceTypes(ctx, in, o...)
}

func (c *countingEC2) TerminateInstances(ctx context.Context, in *ec2.TerminateInstancesInput, o ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error) {
	c.count("TerminateInstances")
	return c.EC2.TerminateInstances(ctx, in, o...)
}

func (c *countingEC2) DeleteTags(ctx context.Context, in *ec2.DeleteTagsInput, o ...func(*ec2.Options)) (*ec2.DeleteTagsOutput, error) {
	c.count("DeleteTags")
	return c.EC2.DeleteTags(ctx, in, o...)
}

func (c *countingEC2) StartInstances(ctx context.Context, in *ec2.StartInstancesInput, o ...func(*ec2.Options)) (*ec2.StartInstancesOutput, error) {
	c.count("StartInstances")
	return c.EC2.StartInstances(ctx, in, o...)
}

func (c *countingEC2) setNoCapacity(keys ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noCap = map[string]bool{}
	for _, k := range keys {
		c.noCap[k] = true
	}
}

// env is one test's world plus the wiring provision and release run with.
type env struct {
	*localenv.Env
	t   *testing.T
	ctx context.Context
	ec2 *countingEC2
	w   *step.Wiring
}

func newEnv(t *testing.T, o localenv.Options) *env {
	t.Helper()
	testbed.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	o.Stack = testbed.Name(t, "prov")
	o.Baked = true
	o.AgentArgs = append([]string{"--poll-interval", "250ms"}, o.AgentArgs...)
	le, err := localenv.Start(ctx, o)
	require.NoError(t, err)
	e := &env{Env: le, t: t, ctx: ctx}
	e.ec2 = &countingEC2{EC2: le.EC2, subnetAZ: map[string]string{}}
	for _, s := range le.Doc.Subnets {
		e.ec2.subnetAZ[s.ID] = s.AZ
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e.w, err = le.Wiring(e.ec2, log)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, id := range e.Sim.Running() {
				t.Logf("agent log of %s:\n%s", id, e.Sim.AgentLog(id))
			}
		}
		le.Close()
	})
	return e
}

// config is a provision request for run.
func (e *env) config(run string, n int) provision.Config {
	return provision.Config{Stack: e.Stack, Pool: e.Pool, Count: n, RunID: run, RunAttempt: 1, Repository: localenv.Repo,
		ServerURL: e.GH.URL(), RegistrationTimeout: time.Minute}
}

func (e *env) provision(cfg provision.Config) (*provision.Result, error) {
	e.t.Helper()
	deps, err := e.w.Provision(e.ctx, cfg.Pool)
	require.NoError(e.t, err)
	return provision.Run(e.ctx, cfg, deps)
}

func (e *env) mustProvision(run string, n int) *provision.Result {
	e.t.Helper()
	res, err := e.provision(e.config(run, n))
	require.NoError(e.t, err)
	require.Len(e.t, res.Instances, n)
	return res
}

func (e *env) release(run string) *release.Result {
	e.t.Helper()
	releaser, warnings, err := e.w.Release(e.ctx, release.Config{DeregisterTimeout: 30 * time.Second})
	require.NoError(e.t, err)
	require.Empty(e.t, warnings)
	res, err := releaser.Release(e.ctx, run)
	require.NoError(e.t, err)
	return res
}

func ids(res *provision.Result) []string {
	out := make([]string, len(res.Instances))
	for i, x := range res.Instances {
		out[i] = x.ID
	}
	return out
}

// items reads the items of ids.
func (e *env) items(ids []string) map[string]*state.Instance {
	e.t.Helper()
	out, err := e.Store.GetMany(e.ctx, ids)
	require.NoError(e.t, err)
	return out
}

// liveInstances returns the ids of the stack's instances EC2 has not terminated.
func (e *env) liveInstances() []string {
	e.t.Helper()
	out, err := e.EC2.DescribeInstances(e.ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:hangar:stack"), Values: []string{e.Stack}},
		{Name: aws.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped"}}}})
	require.NoError(e.t, err)
	var live []string
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			live = append(live, aws.ToString(in.InstanceId))
		}
	}
	slices.Sort(live)
	return live
}

// offered counts the pool's visible offers by instance (once, at the end of a test).
func (e *env) offered() map[string]int {
	e.t.Helper()
	out, err := e.Offered(e.ctx)
	require.NoError(e.t, err)
	return out
}
