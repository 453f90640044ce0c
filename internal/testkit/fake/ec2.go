package fake

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// EC2 keeps instances in memory and serves what fleet.Launcher, lifecycle and the use cases ask
// of EC2: instant fleets (with capacity shortages injected per type, zone and market), instance
// type sizes, tags, start, stop, terminate and describe.
type EC2 struct {
	recorder
	// Subnets maps subnet ids to their zones, for launches (fake.Pool's are added by NewWorld).
	Subnets map[string]string
	// Sizes gives instance types' vCPU and memory; unknown types are 2 vCPU, 4096 MiB.
	Sizes map[string][2]int
	// Catalog, when set, is the region's instance type catalogue DescribeInstanceTypes answers
	// from instead, by name or by filters, CatalogPage types a page (100 when 0): CatalogTypes.
	Catalog     []InstanceType
	CatalogPage int
	// SpotPrices gives the spot price history's latest hourly price per "type/zone".
	SpotPrices map[string]float64

	mu        sync.Mutex
	instances map[string]*ec2Instance
	noCap     []capacityGap
	partial   []int
	refused   map[string]error // "<operation> <instance id>" → the error every such call gets
	fleets    []*ec2.CreateFleetInput
	seq       int
}

type ec2Instance struct {
	id, typ, subnet, az string
	lifecycle           ec2types.InstanceLifecycle
	state               ec2types.InstanceStateName
	tags                map[string]string
	launched            time.Time
}

// capacityGap is a (type, zone, market) with no capacity; "" matches any.
type capacityGap struct{ typ, az, market string }

// Market names for NoCapacity.
const (
	Spot     = string(ec2types.DefaultTargetCapacityTypeSpot)
	OnDemand = string(ec2types.DefaultTargetCapacityTypeOnDemand)
)

// NoCapacity makes CreateFleet report InsufficientInstanceCapacity for every override of type
// typ in zone az in market (Spot or OnDemand); an empty argument matches any.
func (e *EC2) NoCapacity(typ, az, market string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.noCap = append(e.noCap, capacityGap{typ, az, market})
}

// Partial makes the next len(n) CreateFleet requests launch at most n[i] instances each, and
// report InsufficientInstanceCapacity for the rest on the override they used, as an instant fleet
// that is partly fulfilled does.
func (e *EC2) Partial(n ...int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.partial = append(e.partial, n...)
}

// Refuse makes every call of op (TerminateInstances, StartInstances, StopInstances, DeleteTags)
// that names instance id fail with err, the whole request refused as EC2 refuses it for one bad id.
func (e *EC2) Refuse(op, id string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.refused == nil {
		e.refused = map[string]error{}
	}
	e.refused[op+" "+id] = err
}

// refusal is the error Refuse set for op on one of ids, if any.
func (e *EC2) refusal(op string, ids []string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		if err, ok := e.refused[op+" "+id]; ok {
			return err
		}
	}
	return nil
}

// Reset forgets instances, capacity gaps and partial fulfilments, refusals, fleets, recorded
// calls and injected errors.
func (e *EC2) Reset() {
	e.mu.Lock()
	e.instances, e.noCap, e.partial, e.refused, e.fleets = nil, nil, nil, nil, nil
	e.mu.Unlock()
	e.resetCalls()
}

func (e *EC2) short(typ, az, market string) bool {
	for _, g := range e.noCap {
		if (g.typ == "" || g.typ == typ) && (g.az == "" || g.az == az) && (g.market == "" || g.market == market) {
			return true
		}
	}
	return false
}

// CreateFleet launches the requested capacity on the first override (in request order) that has
// capacity, and reports InsufficientInstanceCapacity for each override it skipped.
func (e *EC2) CreateFleet(_ context.Context, in *ec2.CreateFleetInput, _ ...func(*ec2.Options)) (*ec2.CreateFleetOutput, error) {
	if err := e.call("CreateFleet"); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fleets = append(e.fleets, in)
	market := string(in.TargetCapacitySpecification.DefaultTargetCapacityType)
	n := int(aws.ToInt32(in.TargetCapacitySpecification.TotalTargetCapacity))
	short := 0 // what a partial fulfilment leaves out
	if len(e.partial) > 0 {
		if at := e.partial[0]; at < n {
			short, n = n-at, at
		}
		e.partial = e.partial[1:]
	}
	tags := map[string]string{}
	for _, ts := range in.TagSpecifications {
		if ts.ResourceType == ec2types.ResourceTypeInstance {
			for _, t := range ts.Tags {
				tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
			}
		}
	}
	life := ec2types.InstanceLifecycleSpot
	if market == OnDemand {
		life = ec2types.InstanceLifecycleOnDemand
	}
	out := &ec2.CreateFleetOutput{}
	for _, ov := range in.LaunchTemplateConfigs[0].Overrides {
		subnet := aws.ToString(ov.SubnetId)
		az := e.Subnets[subnet]
		lo := &ec2types.LaunchTemplateAndOverridesResponse{Overrides: &ec2types.FleetLaunchTemplateOverrides{
			InstanceType: ov.InstanceType, SubnetId: ov.SubnetId, AvailabilityZone: aws.String(az)}}
		if e.short(string(ov.InstanceType), az, market) {
			out.Errors = append(out.Errors, ec2types.CreateFleetError{ErrorCode: aws.String("InsufficientInstanceCapacity"),
				ErrorMessage:               aws.String(fmt.Sprintf("no %s %s capacity in %s", market, ov.InstanceType, az)),
				LaunchTemplateAndOverrides: lo, Lifecycle: life})
			continue
		}
		var ids []string
		for range n {
			e.seq++
			id := fmt.Sprintf("i-%017x", 0xfa4e0000000+e.seq)
			if e.instances == nil {
				e.instances = map[string]*ec2Instance{}
			}
			e.instances[id] = &ec2Instance{id: id, typ: string(ov.InstanceType), subnet: subnet, az: az, lifecycle: life,
				state: ec2types.InstanceStateNameRunning, tags: maps.Clone(tags), launched: time.Now()}
			ids = append(ids, id)
		}
		if len(ids) > 0 {
			out.Instances = append(out.Instances, ec2types.CreateFleetInstance{InstanceIds: ids, InstanceType: ov.InstanceType,
				Lifecycle: life, LaunchTemplateAndOverrides: lo})
		}
		if short > 0 {
			out.Errors = append(out.Errors, ec2types.CreateFleetError{ErrorCode: aws.String("InsufficientInstanceCapacity"),
				ErrorMessage:               aws.String(fmt.Sprintf("only %d of %d %s %s in %s", len(ids), len(ids)+short, market, ov.InstanceType, az)),
				LaunchTemplateAndOverrides: lo, Lifecycle: life})
		}
		break
	}
	return out, nil
}

// Fleets returns the CreateFleet requests made so far.
func (e *EC2) Fleets() []*ec2.CreateFleetInput {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.fleets)
}

// DescribeInstanceTypes returns each type's size (Sizes, or 2 vCPU and 4096 MiB), or, with a
// Catalog, describes its types as EC2 does (describeCatalog).
func (e *EC2) DescribeInstanceTypes(_ context.Context, in *ec2.DescribeInstanceTypesInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error) {
	if err := e.call("DescribeInstanceTypes"); err != nil {
		return nil, err
	}
	if e.Catalog != nil {
		return e.describeCatalog(in)
	}
	out := &ec2.DescribeInstanceTypesOutput{}
	for _, t := range in.InstanceTypes {
		size, ok := e.Sizes[string(t)]
		if !ok {
			size = [2]int{2, 4096}
		}
		out.InstanceTypes = append(out.InstanceTypes, ec2types.InstanceTypeInfo{InstanceType: t,
			VCpuInfo: &ec2types.VCpuInfo{DefaultVCpus: aws.Int32(int32(size[0]))}, MemoryInfo: &ec2types.MemoryInfo{SizeInMiB: aws.Int64(int64(size[1]))}})
	}
	return out, nil
}

// Launch adds an instance as if launched outside any fleet request (an orphan, say), with tags,
// at launched.
func (e *EC2) Launch(id, typ string, tags map[string]string, launched time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.instances == nil {
		e.instances = map[string]*ec2Instance{}
	}
	e.instances[id] = &ec2Instance{id: id, typ: typ, state: ec2types.InstanceStateNameRunning, tags: maps.Clone(tags),
		launched: launched, lifecycle: ec2types.InstanceLifecycleOnDemand}
}

// State returns instance id's state ("" when EC2 does not know it).
func (e *EC2) State(id string) ec2types.InstanceStateName {
	e.mu.Lock()
	defer e.mu.Unlock()
	if in, ok := e.instances[id]; ok {
		return in.state
	}
	return ""
}

// Tags returns a copy of instance id's tags.
func (e *EC2) Tags(id string) map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if in, ok := e.instances[id]; ok {
		return maps.Clone(in.tags)
	}
	return nil
}

// InState returns the ids of the instances in state st, sorted.
func (e *EC2) InState(st ec2types.InstanceStateName) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for id, in := range e.instances {
		if in.state == st {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// each applies f to the instances of ids, or fails with InvalidInstanceID.NotFound naming the
// unknown ones (nothing changed).
func (e *EC2) each(ids []string, f func(*ec2Instance)) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var missing []string
	for _, id := range ids {
		if _, ok := e.instances[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return APIError("InvalidInstanceID.NotFound", fmt.Sprintf("The instance IDs '%s' do not exist", strings.Join(missing, ", ")))
	}
	for _, id := range ids {
		f(e.instances[id])
	}
	return nil
}

// DeleteTags removes the tags named (by key) from the instances.
func (e *EC2) DeleteTags(_ context.Context, in *ec2.DeleteTagsInput, _ ...func(*ec2.Options)) (*ec2.DeleteTagsOutput, error) {
	if err := e.call("DeleteTags"); err != nil {
		return nil, err
	}
	if err := e.refusal("DeleteTags", in.Resources); err != nil {
		return nil, err
	}
	return &ec2.DeleteTagsOutput{}, e.each(in.Resources, func(x *ec2Instance) {
		for _, t := range in.Tags {
			delete(x.tags, aws.ToString(t.Key))
		}
	})
}

// StartInstances starts stopped instances; a terminated one is IncorrectInstanceState.
func (e *EC2) StartInstances(_ context.Context, in *ec2.StartInstancesInput, _ ...func(*ec2.Options)) (*ec2.StartInstancesOutput, error) {
	if err := e.call("StartInstances"); err != nil {
		return nil, err
	}
	if err := e.refusal("StartInstances", in.InstanceIds); err != nil {
		return nil, err
	}
	return &ec2.StartInstancesOutput{}, e.move(in.InstanceIds, ec2types.InstanceStateNameRunning)
}

// StopInstances stops running instances.
func (e *EC2) StopInstances(_ context.Context, in *ec2.StopInstancesInput, _ ...func(*ec2.Options)) (*ec2.StopInstancesOutput, error) {
	if err := e.call("StopInstances"); err != nil {
		return nil, err
	}
	if err := e.refusal("StopInstances", in.InstanceIds); err != nil {
		return nil, err
	}
	return &ec2.StopInstancesOutput{}, e.move(in.InstanceIds, ec2types.InstanceStateNameStopped)
}

func (e *EC2) move(ids []string, to ec2types.InstanceStateName) error {
	e.mu.Lock()
	for _, id := range ids {
		if in, ok := e.instances[id]; ok && in.state == ec2types.InstanceStateNameTerminated {
			e.mu.Unlock()
			return APIError("IncorrectInstanceState", "The instance '"+id+"' is not in a state from which it can be "+string(to))
		}
	}
	e.mu.Unlock()
	return e.each(ids, func(x *ec2Instance) { x.state = to })
}

// TerminateInstances terminates instances (again, harmlessly, if terminated already).
func (e *EC2) TerminateInstances(_ context.Context, in *ec2.TerminateInstancesInput, _ ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error) {
	if err := e.call("TerminateInstances"); err != nil {
		return nil, err
	}
	if err := e.refusal("TerminateInstances", in.InstanceIds); err != nil {
		return nil, err
	}
	return &ec2.TerminateInstancesOutput{}, e.each(in.InstanceIds, func(x *ec2Instance) { x.state = ec2types.InstanceStateNameTerminated })
}

// DescribeInstances returns the instances matching every filter (instance-id, tag:<key>,
// tag-key, instance-state-name), in one page.
func (e *EC2) DescribeInstances(_ context.Context, in *ec2.DescribeInstancesInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	if err := e.call("DescribeInstances"); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var res ec2types.Reservation
	for _, id := range slices.Sorted(maps.Keys(e.instances)) {
		x := e.instances[id]
		if len(in.InstanceIds) > 0 && !slices.Contains(in.InstanceIds, id) {
			continue
		}
		if !matches(x, in.Filters) {
			continue
		}
		var tags []ec2types.Tag
		for _, k := range slices.Sorted(maps.Keys(x.tags)) {
			tags = append(tags, ec2types.Tag{Key: aws.String(k), Value: aws.String(x.tags[k])})
		}
		res.Instances = append(res.Instances, ec2types.Instance{InstanceId: aws.String(id), InstanceType: ec2types.InstanceType(x.typ),
			State: &ec2types.InstanceState{Name: x.state}, Tags: tags, LaunchTime: aws.Time(x.launched), InstanceLifecycle: ec2types.InstanceLifecycleType(x.lifecycle),
			SubnetId: aws.String(x.subnet), Placement: &ec2types.Placement{AvailabilityZone: aws.String(x.az)}})
	}
	out := &ec2.DescribeInstancesOutput{}
	if len(res.Instances) > 0 {
		out.Reservations = []ec2types.Reservation{res}
	}
	return out, nil
}

func matches(x *ec2Instance, filters []ec2types.Filter) bool {
	for _, f := range filters {
		name := aws.ToString(f.Name)
		var have []string
		switch {
		case name == "instance-id":
			have = []string{x.id}
		case name == "instance-state-name":
			have = []string{string(x.state)}
		case name == "tag-key":
			have = slices.Collect(maps.Keys(x.tags))
		case strings.HasPrefix(name, "tag:"):
			if v, ok := x.tags[strings.TrimPrefix(name, "tag:")]; ok {
				have = []string{v}
			}
		default:
			return false // an unknown filter matches nothing rather than everything
		}
		if !slices.ContainsFunc(have, func(v string) bool { return slices.Contains(f.Values, v) }) {
			return false
		}
	}
	return true
}

// DescribeSpotPriceHistory returns the latest spot price of each type asked for in each zone
// SpotPrices knows, in one page.
func (e *EC2) DescribeSpotPriceHistory(_ context.Context, in *ec2.DescribeSpotPriceHistoryInput, _ ...func(*ec2.Options)) (*ec2.DescribeSpotPriceHistoryOutput, error) {
	if err := e.call("DescribeSpotPriceHistory"); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	out := &ec2.DescribeSpotPriceHistoryOutput{}
	for _, k := range slices.Sorted(maps.Keys(e.SpotPrices)) {
		typ, az, _ := strings.Cut(k, "/")
		if len(in.InstanceTypes) > 0 && !slices.Contains(in.InstanceTypes, ec2types.InstanceType(typ)) {
			continue
		}
		out.SpotPriceHistory = append(out.SpotPriceHistory, ec2types.SpotPrice{InstanceType: ec2types.InstanceType(typ),
			AvailabilityZone: aws.String(az), SpotPrice: aws.String(fmt.Sprintf("%.6f", e.SpotPrices[k])),
			ProductDescription: ec2types.RIProductDescriptionLinuxUnix, Timestamp: aws.Time(time.Now())})
	}
	return out, nil
}
