package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/platform/awserr"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
)

// Instance is one launched instance.
type Instance struct {
	ID, Type, AZ, Subnet string
	UsageClass           string // spot or on-demand
	VCPU, MemoryMiB      int
}

// Request is what to launch.
type Request struct {
	Pool  *pooldoc.Document
	Count int
	// Market is spot, on-demand or spot-fallback (the pool's when empty).
	Market string
	// Types are the instance types to use (the pool's when empty), in preference order.
	Types []string
	// Tags are applied to the instances and their volumes: Tags first, then Reserved, so that
	// reserved (hangar:*) tags always win.
	Tags, Reserved map[string]string
	// Deadline bounds retries after capacity errors.
	Deadline time.Time
	// Token makes the requests idempotent: every CreateFleet carries Token-<attempt>.
	Token string
	// OnLaunch is called with the instances of every response, before the next request.
	OnLaunch func(ctx context.Context, launched []Instance) error
}

// PermanentError is a launch failure that no retry can fix. Hint says what to change.
type PermanentError struct {
	Code, Message, Hint string
}

func (e *PermanentError) Error() string {
	return fmt.Sprintf("EC2 refused to launch (%s: %s): %s", e.Code, e.Message, e.Hint)
}

// MarkRecorded removes TagUnrecorded from instances whose items now exist (one request).
func MarkRecorded(ctx context.Context, ec2Client awsapi.EC2, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := ec2Client.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: ids, Tags: []ec2types.Tag{{Key: aws.String(TagUnrecorded)}}})
	if err != nil {
		return fmt.Errorf("mark %d instances recorded: %w", len(ids), err)
	}
	return nil
}

// ErrNoCapacity is returned (wrapped) when the deadline passes with instances still missing
// because no type, zone or market had capacity.
var ErrNoCapacity = errors.New("no capacity")

// Launcher launches instances. It is safe for concurrent use.
type Launcher struct {
	EC2 awsapi.EC2
	Log *slog.Logger
	// MaxBackoff caps the wait between rounds once every override is out of capacity (default 30s).
	MaxBackoff time.Duration

	mu       sync.Mutex
	specs    map[string]ec2types.InstanceTypeInfo
	resolved map[requirementsKey][]string
}

type override struct{ typ, subnet, az string }

// launching is one Launch in progress: the overrides, which of them are out of capacity, the
// market being tried, and what has been launched.
type launching struct {
	l            *Launcher
	req          Request
	market       string
	types        []string
	all          []override
	exhausted    map[override]bool
	capacityType ec2types.DefaultTargetCapacityType
	backoff      wait.Backoff // between rounds with every override out of capacity
	lastCapacity string       // the last capacity error code, for the final error
	out          []Instance
}

// Launch launches req.Count instances and returns those it launched. When it returns an error,
// the instances it did launch are still returned (and were handed to OnLaunch).
func (l *Launcher) Launch(ctx context.Context, req Request) ([]Instance, error) {
	g, err := l.start(req)
	if err != nil {
		return nil, err
	}
	for attempt := 1; len(g.out) < req.Count; attempt++ {
		avail := g.available()
		if len(avail) == 0 {
			if err := g.nothingLeft(ctx); err != nil {
				return g.out, g.outOfTime(err)
			}
			continue
		}
		if err := g.round(ctx, avail, attempt); err != nil {
			return g.out, g.outOfTime(err)
		}
	}
	return g.out, nil
}

// outOfTime reports a deadline that passed while capacity was missing (during a backoff or the
// round after it) as what it is, no capacity, keeping the context's error in the chain.
func (g *launching) outOfTime(err error) error {
	if g.lastCapacity == "" || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrNoCapacity) {
		return err
	}
	return fmt.Errorf("launch %d of %d instances of pool %s: %w before the deadline (last: %s): %w",
		g.req.Count-len(g.out), g.req.Count, g.req.Pool.Name, ErrNoCapacity, g.lastCapacity, err)
}

// start checks the request and lays out every (type × subnet) override.
func (l *Launcher) start(req Request) (*launching, error) {
	p := req.Pool
	g := &launching{l: l, req: req, market: req.Market, types: req.Types, exhausted: map[override]bool{},
		backoff: wait.Backoff{Initial: time.Second, Max: l.MaxBackoff}}
	if g.market == "" {
		g.market = p.Market
	}
	if len(g.types) == 0 {
		g.types = p.InstanceTypes
	}
	if g.backoff.Max == 0 {
		g.backoff.Max = 30 * time.Second
	}
	if req.Count < 1 {
		return nil, fmt.Errorf("launch: count %d: want 1 or more", req.Count)
	}
	if len(g.types) == 0 || len(p.Subnets) == 0 {
		return nil, errors.New("launch: the pool has no instance types or no subnets")
	}
	for _, t := range g.types {
		for _, s := range p.Subnets {
			g.all = append(g.all, override{t, s.ID, s.AZ})
		}
	}
	g.capacityType = ec2types.DefaultTargetCapacityTypeSpot
	if g.market == pooldoc.MarketOnDemand {
		g.capacityType = ec2types.DefaultTargetCapacityTypeOnDemand
	}
	return g, nil
}

// available returns the overrides not known to be out of capacity.
func (g *launching) available() []override {
	var avail []override
	for _, o := range g.all {
		if !g.exhausted[o] {
			avail = append(avail, o)
		}
	}
	return avail
}

// nothingLeft handles a round with every override out of capacity: spot-fallback falls back to
// on-demand; otherwise it waits (jittered, growing) and tries everything again, unless the
// deadline would pass first.
func (g *launching) nothingLeft(ctx context.Context) error {
	p := g.req.Pool
	if g.market == pooldoc.MarketSpotFallback && g.capacityType == ec2types.DefaultTargetCapacityTypeSpot {
		g.l.log().Warn("spot has no capacity in any type and zone; falling back to on-demand", "pool", p.Name)
		g.capacityType = ec2types.DefaultTargetCapacityTypeOnDemand
		clear(g.exhausted)
		return nil
	}
	delay := g.backoff.Next()
	if !g.req.Deadline.IsZero() && time.Now().Add(delay).After(g.req.Deadline) {
		return fmt.Errorf("launch %d of %d instances of pool %s: %w in any of %d types × %d subnets before the deadline (last: %s)",
			g.req.Count-len(g.out), g.req.Count, p.Name, ErrNoCapacity, len(g.types), len(p.Subnets), g.lastCapacity)
	}
	g.l.log().Warn("no capacity anywhere; backing off", "pool", p.Name, "wait", delay, "missing", g.req.Count-len(g.out))
	if err := wait.Sleep(ctx, delay); err != nil {
		return err
	}
	clear(g.exhausted)
	if g.market == pooldoc.MarketSpotFallback {
		g.capacityType = ec2types.DefaultTargetCapacityTypeSpot
	}
	return nil
}

// exhaust marks overrides out of capacity for this round of backoff.
func (g *launching) exhaust(code string, overrides []override) {
	g.lastCapacity = code
	for _, o := range overrides {
		g.exhausted[o] = true
	}
}

// round makes one CreateFleet request over avail, records what it launched, and sorts its
// errors: capacity errors exhaust their overrides, anything else is permanent.
func (g *launching) round(ctx context.Context, avail []override, attempt int) error {
	resp, err := g.l.EC2.CreateFleet(ctx, g.l.input(g.req, avail, g.capacityType, g.req.Count-len(g.out), attempt))
	if err != nil {
		switch awserr.Classify(err) {
		case awserr.Capacity, awserr.Throttled:
			g.exhaust(awserr.Code(err), avail)
			return nil
		case awserr.Canceled:
			return err
		default:
			return permanent(awserr.Code(err), err.Error(), err)
		}
	}
	launched, err := g.l.launched(ctx, resp, avail, g.capacityType)
	if len(launched) > 0 {
		g.out = append(g.out, launched...)
		if g.req.OnLaunch != nil {
			if cbErr := g.req.OnLaunch(ctx, launched); cbErr != nil {
				return fmt.Errorf("record launched instances: %w", cbErr)
			}
		}
	}
	if err != nil {
		return err
	}
	for _, e := range resp.Errors {
		code, msg := aws.ToString(e.ErrorCode), aws.ToString(e.ErrorMessage)
		switch awserr.ClassifyCode(code) {
		case awserr.Capacity, awserr.Throttled:
			g.exhaust(code, overridesOf(e.LaunchTemplateAndOverrides, avail))
		default:
			if len(g.out) < g.req.Count {
				return permanent(code, msg, nil)
			}
		}
	}
	if len(launched) == 0 && len(resp.Errors) == 0 {
		// Nothing launched and nothing said: treat every override tried as out of capacity.
		g.exhaust(g.lastCapacity, avail)
	}
	return nil
}

func (l *Launcher) log() *slog.Logger {
	if l.Log != nil {
		return l.Log
	}
	return slog.Default()
}

// input builds one instant CreateFleet request.
func (l *Launcher) input(req Request, avail []override, capacityType ec2types.DefaultTargetCapacityType, n, attempt int) *ec2.CreateFleetInput {
	p := req.Pool
	overrides := make([]ec2types.FleetLaunchTemplateOverridesRequest, len(avail))
	for i, o := range avail {
		overrides[i] = ec2types.FleetLaunchTemplateOverridesRequest{InstanceType: ec2types.InstanceType(o.typ), SubnetId: aws.String(o.subnet)}
		if p.AllocationStrategy == pooldoc.AllocationPriority {
			overrides[i].Priority = aws.Float64(float64(slices.Index(p.InstanceTypes, o.typ) + 1))
		}
	}
	in := &ec2.CreateFleetInput{
		Type: ec2types.FleetTypeInstant,
		TargetCapacitySpecification: &ec2types.TargetCapacitySpecificationRequest{
			TotalTargetCapacity: aws.Int32(int32(n)), DefaultTargetCapacityType: capacityType,
		},
		LaunchTemplateConfigs: []ec2types.FleetLaunchTemplateConfigRequest{{
			LaunchTemplateSpecification: &ec2types.FleetLaunchTemplateSpecificationRequest{
				LaunchTemplateId: aws.String(p.LaunchTemplate.ID), Version: aws.String(p.LaunchTemplate.Version),
			},
			Overrides: overrides,
		}},
		TagSpecifications: []ec2types.TagSpecification{
			{ResourceType: ec2types.ResourceTypeInstance, Tags: tags(req)},
			{ResourceType: ec2types.ResourceTypeVolume, Tags: tags(req)},
		},
	}
	if req.Token != "" {
		in.ClientToken = aws.String(req.Token + "-" + strconv.Itoa(attempt))
	}
	if capacityType == ec2types.DefaultTargetCapacityTypeSpot {
		strategy := ec2types.SpotAllocationStrategyPriceCapacityOptimized
		if p.AllocationStrategy == pooldoc.AllocationPriority {
			strategy = ec2types.SpotAllocationStrategyCapacityOptimizedPrioritized
		}
		in.SpotOptions = &ec2types.SpotOptionsRequest{AllocationStrategy: strategy}
	} else {
		strategy := ec2types.FleetOnDemandAllocationStrategyLowestPrice
		if p.AllocationStrategy == pooldoc.AllocationPriority {
			strategy = ec2types.FleetOnDemandAllocationStrategyPrioritized
		}
		in.OnDemandOptions = &ec2types.OnDemandOptionsRequest{AllocationStrategy: strategy}
	}
	return in
}

// launched turns a response's instances into Instances, with each type's vCPU and memory.
func (l *Launcher) launched(ctx context.Context, resp *ec2.CreateFleetOutput, avail []override, capacityType ec2types.DefaultTargetCapacityType) ([]Instance, error) {
	azOf := map[string]string{}
	for _, o := range avail {
		azOf[o.subnet] = o.az
	}
	var out []Instance
	var types []string
	for _, f := range resp.Instances {
		usage := state.UsageOnDemand
		if f.Lifecycle == ec2types.InstanceLifecycleSpot || (f.Lifecycle == "" && capacityType == ec2types.DefaultTargetCapacityTypeSpot) {
			usage = state.UsageSpot
		}
		var subnet, az string
		if f.LaunchTemplateAndOverrides != nil && f.LaunchTemplateAndOverrides.Overrides != nil {
			subnet = aws.ToString(f.LaunchTemplateAndOverrides.Overrides.SubnetId)
			az = aws.ToString(f.LaunchTemplateAndOverrides.Overrides.AvailabilityZone)
		}
		if az == "" {
			az = azOf[subnet]
		}
		for _, id := range f.InstanceIds {
			out = append(out, Instance{ID: id, Type: string(f.InstanceType), AZ: az, Subnet: subnet, UsageClass: usage})
		}
		types = append(types, string(f.InstanceType))
	}
	if len(out) == 0 {
		return nil, nil
	}
	specs, err := l.instanceTypes(ctx, types)
	if err != nil {
		// The instances exist: hand them over without sizes rather than lose them.
		l.log().Warn("describe instance types", "error", err)
	}
	for i := range out {
		if s, ok := specs[out[i].Type]; ok {
			out[i].VCPU = int(aws.ToInt32(s.VCpuInfo.DefaultVCpus))
			out[i].MemoryMiB = int(aws.ToInt64(s.MemoryInfo.SizeInMiB))
		}
	}
	return out, nil
}

// Spec is an instance type's size.
type Spec struct{ VCPU, MemoryMiB int }

// Describe returns the sizes of types (from EC2, each type asked for once per Launcher).
func (l *Launcher) Describe(ctx context.Context, types []string) (map[string]Spec, error) {
	infos, err := l.instanceTypes(ctx, types)
	if err != nil {
		return nil, err
	}
	out := map[string]Spec{}
	for _, t := range types {
		if it, ok := infos[t]; ok {
			out[t] = Spec{VCPU: int(aws.ToInt32(it.VCpuInfo.DefaultVCpus)), MemoryMiB: int(aws.ToInt64(it.MemoryInfo.SizeInMiB))}
		}
	}
	return out, nil
}

// instanceTypes returns the descriptions of types, asking EC2 only for those not seen before.
func (l *Launcher) instanceTypes(ctx context.Context, types []string) (map[string]ec2types.InstanceTypeInfo, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.specs == nil {
		l.specs = map[string]ec2types.InstanceTypeInfo{}
	}
	var missing []ec2types.InstanceType
	for _, t := range types {
		if _, ok := l.specs[t]; !ok && !slices.Contains(missing, ec2types.InstanceType(t)) {
			missing = append(missing, ec2types.InstanceType(t))
		}
	}
	if len(missing) > 0 {
		out, err := l.EC2.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: missing})
		if err != nil {
			return l.specs, fmt.Errorf("describe instance types %v: %w", missing, err)
		}
		for _, it := range out.InstanceTypes {
			l.specs[string(it.InstanceType)] = it
		}
	}
	return l.specs, nil
}

// overridesOf returns the overrides an error entry is about (all of avail when it names none).
func overridesOf(lo *ec2types.LaunchTemplateAndOverridesResponse, avail []override) []override {
	if lo == nil || lo.Overrides == nil {
		return avail
	}
	typ, subnet, az := string(lo.Overrides.InstanceType), aws.ToString(lo.Overrides.SubnetId), aws.ToString(lo.Overrides.AvailabilityZone)
	var out []override
	for _, o := range avail {
		if (typ == "" || o.typ == typ) && (subnet == "" || o.subnet == subnet) && (az == "" || o.az == az) {
			out = append(out, o)
		}
	}
	return out
}

// hints say what to fix for permanent errors.
var hints = map[string]string{
	"InvalidAMIID.NotFound":            "the pool's launch template names an AMI that does not exist in this region: update the pool's image and redeploy",
	"InvalidAMIID.Malformed":           "the pool's launch template names a malformed AMI id: fix the pool's image and redeploy",
	"InvalidLaunchTemplateId.NotFound": "the pool's launch template is gone: redeploy the stack",
	"InvalidSubnetID.NotFound":         "a subnet of the pool does not exist: fix the pool's subnets and redeploy",
	"InvalidIamInstanceProfile.Name":   "the instance profile of the launch template does not exist: redeploy the stack",
	"UnauthorizedOperation":            "the provision role may not launch instances with this template: check the role the stack created and the repository's OIDC trust",
	"InvalidParameterValue":            "EC2 rejected a launch parameter: check the pool's instance types, subnets and template",
	"InvalidParameterCombination":      "EC2 rejected a combination of launch parameters: check the pool's instance types against its AMI's architecture",
	"OptInRequired":                    "the account is not subscribed to the AMI or service: accept its terms in the console",
	"InvalidKeyPair.NotFound":          "the launch template names a key pair that does not exist: fix the template",
	"InvalidGroup.NotFound":            "a security group of the launch template does not exist: redeploy the stack",
}

func permanent(code, msg string, cause error) error {
	hint, ok := hints[code]
	if !ok {
		hint = "not a capacity problem, so retrying will not help; check the pool's launch template, subnets and types"
	}
	if cause != nil {
		msg = cause.Error()
	}
	return &PermanentError{Code: code, Message: msg, Hint: hint}
}
