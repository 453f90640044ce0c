package fleet

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// fakeEC2 answers CreateFleet with a script of responses (fault injection; the real behaviour is
// tested against moto through provision).
type fakeEC2 struct {
	mu        sync.Mutex
	calls     []*ec2.CreateFleetInput
	answer    func(n int, in *ec2.CreateFleetInput) (*ec2.CreateFleetOutput, error)
	nextID    int
	described int
}

func (f *fakeEC2) CreateFleet(_ context.Context, in *ec2.CreateFleetInput, _ ...func(*ec2.Options)) (*ec2.CreateFleetOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, in)
	return f.answer(len(f.calls), in)
}

func (f *fakeEC2) DescribeInstanceTypes(_ context.Context, in *ec2.DescribeInstanceTypesInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error) {
	f.described++
	var out []ec2types.InstanceTypeInfo
	for _, t := range in.InstanceTypes {
		out = append(out, ec2types.InstanceTypeInfo{InstanceType: t, VCpuInfo: &ec2types.VCpuInfo{DefaultVCpus: aws.Int32(2)},
			MemoryInfo: &ec2types.MemoryInfo{SizeInMiB: aws.Int64(4096)}})
	}
	return &ec2.DescribeInstanceTypesOutput{InstanceTypes: out}, nil
}

// launch returns n instances of the first override.
func (f *fakeEC2) launch(in *ec2.CreateFleetInput, n int) ec2types.CreateFleetInstance {
	ov := in.LaunchTemplateConfigs[0].Overrides[0]
	var ids []string
	for range n {
		f.nextID++
		ids = append(ids, "i-0000000000000000"+string(rune('0'+f.nextID)))
	}
	life := ec2types.InstanceLifecycleOnDemand
	if in.TargetCapacitySpecification.DefaultTargetCapacityType == ec2types.DefaultTargetCapacityTypeSpot {
		life = ec2types.InstanceLifecycleSpot
	}
	return ec2types.CreateFleetInstance{InstanceIds: ids, InstanceType: ov.InstanceType, Lifecycle: life,
		LaunchTemplateAndOverrides: &ec2types.LaunchTemplateAndOverridesResponse{Overrides: &ec2types.FleetLaunchTemplateOverrides{
			InstanceType: ov.InstanceType, SubnetId: ov.SubnetId}}}
}

func pool(market string) *pooldoc.Document {
	return &pooldoc.Document{Name: "p", Market: market, AllocationStrategy: pooldoc.AllocationCost,
		LaunchTemplate: pooldoc.LaunchTemplate{ID: "lt-0123456789abcdef0", Version: "3"},
		InstanceTypes:  []string{"c7i.large", "c6i.large"},
		Subnets:        []pooldoc.Subnet{{ID: "subnet-0123456789abcdef0", AZ: "us-east-1a"}, {ID: "subnet-0123456789abcdef1", AZ: "us-east-1b"}},
		Tags:           map[string]string{"team": "ci", "hangar:pool": "spoofed"}}
}

func TestPermanentErrorsFailAtOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		answer func(int, *ec2.CreateFleetInput) (*ec2.CreateFleetOutput, error)
		hint   string
	}{
		{"bad AMI as an API error", func(int, *ec2.CreateFleetInput) (*ec2.CreateFleetOutput, error) {
			return nil, &smithy.GenericAPIError{Code: "InvalidAMIID.NotFound", Message: "The image id '[ami-1]' does not exist"}
		}, "update the pool's image"},
		{"unauthorized per override", func(int, *ec2.CreateFleetInput) (*ec2.CreateFleetOutput, error) {
			return &ec2.CreateFleetOutput{Errors: []ec2types.CreateFleetError{{ErrorCode: aws.String("UnauthorizedOperation"),
				ErrorMessage: aws.String("You are not authorized")}}}, nil
		}, "the provision role may not launch instances"},
		{"missing profile", func(int, *ec2.CreateFleetInput) (*ec2.CreateFleetOutput, error) {
			return nil, &smithy.GenericAPIError{Code: "InvalidIamInstanceProfile.Name", Message: "Invalid IAM Instance Profile name"}
		}, "redeploy the stack"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeEC2{answer: tc.answer}
			_, err := (&Launcher{EC2: f}).Launch(context.Background(), Request{Pool: pool("on-demand"), Count: 2, Deadline: time.Now().Add(time.Minute)})
			var perm *PermanentError
			require.ErrorAs(t, err, &perm)
			require.Contains(t, err.Error(), tc.hint)
			require.Len(t, f.calls, 1, "no retry for a permanent error")
		})
	}
}

func TestRequestShape(t *testing.T) {
	t.Parallel()
	f := &fakeEC2{}
	f.answer = func(_ int, in *ec2.CreateFleetInput) (*ec2.CreateFleetOutput, error) {
		return &ec2.CreateFleetOutput{Instances: []ec2types.CreateFleetInstance{f.launch(in, int(aws.ToInt32(in.TargetCapacitySpecification.TotalTargetCapacity)))}}, nil
	}
	var recorded []Instance
	got, err := (&Launcher{EC2: f}).Launch(context.Background(), Request{Pool: pool("spot"), Count: 3, Token: "tok",
		Tags: map[string]string{"hangar:run-id": "spoofed", "owner": "me"}, Reserved: map[string]string{"hangar:pool": "p"},
		OnLaunch: func(_ context.Context, l []Instance) error { recorded = append(recorded, l...); return nil }})
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.Equal(t, got, recorded, "every launched instance is handed over before Launch returns")
	require.Equal(t, "us-east-1a", got[0].AZ)
	require.Equal(t, 2, got[0].VCPU)
	in := f.calls[0]
	require.Equal(t, ec2types.FleetTypeInstant, in.Type)
	require.Len(t, in.LaunchTemplateConfigs[0].Overrides, 4, "every type × subnet")
	require.Equal(t, ec2types.SpotAllocationStrategyPriceCapacityOptimized, in.SpotOptions.AllocationStrategy)
	require.Equal(t, "tok-1", aws.ToString(in.ClientToken))
	tags := map[string]string{}
	for _, tg := range in.TagSpecifications[0].Tags {
		tags[aws.ToString(tg.Key)] = aws.ToString(tg.Value)
	}
	require.Equal(t, map[string]string{"team": "ci", "owner": "me", "hangar:pool": "p", TagUnrecorded: "true"}, tags,
		"user tags may not set hangar:*; the reserved ones win")
	require.Equal(t, 1, f.described, "instance sizes asked for once")
}

func TestSpotFallbackThenDeadline(t *testing.T) {
	t.Parallel()
	f := &fakeEC2{}
	f.answer = func(_ int, in *ec2.CreateFleetInput) (*ec2.CreateFleetOutput, error) {
		if in.TargetCapacitySpecification.DefaultTargetCapacityType == ec2types.DefaultTargetCapacityTypeSpot {
			return &ec2.CreateFleetOutput{Errors: []ec2types.CreateFleetError{{ErrorCode: aws.String("InsufficientInstanceCapacity")}}}, nil
		}
		return &ec2.CreateFleetOutput{Instances: []ec2types.CreateFleetInstance{f.launch(in, 1)}}, nil
	}
	got, err := (&Launcher{EC2: f}).Launch(context.Background(), Request{Pool: pool("spot-fallback"), Count: 1})
	require.NoError(t, err)
	require.Equal(t, "on-demand", got[0].UsageClass)
	require.Len(t, f.calls, 2, "one spot request, then on-demand")

	none := &fakeEC2{answer: func(int, *ec2.CreateFleetInput) (*ec2.CreateFleetOutput, error) {
		return nil, &smithy.GenericAPIError{Code: "InsufficientInstanceCapacity"}
	}}
	start := time.Now()
	_, err = (&Launcher{EC2: none, MaxBackoff: 200 * time.Millisecond}).Launch(context.Background(),
		Request{Pool: pool("on-demand"), Count: 1, Deadline: time.Now().Add(2 * time.Second)})
	require.ErrorIs(t, err, ErrNoCapacity)
	require.Less(t, time.Since(start), 3*time.Second, "gives up at the deadline")
	require.Greater(t, len(none.calls), 2, "retried with backoff meanwhile")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = (&Launcher{EC2: none}).Launch(ctx, Request{Pool: pool("on-demand"), Count: 1})
	require.ErrorIs(t, err, context.Canceled, "a cancelled launch stops waiting at once")

	// The deadline passing during the round after a wait (a slow machine) is still no capacity.
	late := &fakeEC2{answer: func(n int, _ *ec2.CreateFleetInput) (*ec2.CreateFleetOutput, error) {
		if n == 1 {
			return nil, &smithy.GenericAPIError{Code: "InsufficientInstanceCapacity"}
		}
		return nil, context.DeadlineExceeded
	}}
	_, err = (&Launcher{EC2: late, MaxBackoff: time.Millisecond}).Launch(context.Background(), Request{Pool: pool("on-demand"), Count: 1})
	require.ErrorIs(t, err, ErrNoCapacity)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
