package fleet_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// These tests launch through the real launcher on the fake EC2 (internal/testkit/fake): instant
// fleets, capacity shortages and API errors injected per call.

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func pool(market string) *pooldoc.Document {
	return &pooldoc.Document{Name: "p", Market: market, AllocationStrategy: pooldoc.AllocationCost,
		LaunchTemplate: pooldoc.LaunchTemplate{ID: "lt-0123456789abcdef0", Version: "3"},
		InstanceTypes:  []string{"c7i.large", "c6i.large"},
		Subnets:        []pooldoc.Subnet{{ID: "subnet-0123456789abcdef0", AZ: "us-east-1a"}, {ID: "subnet-0123456789abcdef1", AZ: "us-east-1b"}},
		Tags:           map[string]string{"team": "ci", "hangar:pool": "spoofed"}}
}

// newEC2 is a fake EC2 that knows pool's subnets.
func newEC2() *fake.EC2 {
	return &fake.EC2{Subnets: map[string]string{"subnet-0123456789abcdef0": "us-east-1a", "subnet-0123456789abcdef1": "us-east-1b"}}
}

// refusedPerOverride is the fake EC2 whose CreateFleet fails every override with code, as EC2
// answers a launch it refuses override by override rather than as a whole. The fake reports
// per-override failures for capacity alone (EC2.NoCapacity); this renames their code.
type refusedPerOverride struct {
	*fake.EC2
	code, message string
}

func (r refusedPerOverride) CreateFleet(ctx context.Context, in *ec2.CreateFleetInput, o ...func(*ec2.Options)) (*ec2.CreateFleetOutput, error) {
	out, err := r.EC2.CreateFleet(ctx, in, o...)
	if out != nil {
		for i := range out.Errors {
			out.Errors[i].ErrorCode, out.Errors[i].ErrorMessage = aws.String(r.code), aws.String(r.message)
		}
	}
	return out, err
}

func TestPermanentErrorsFailAtOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ec2  func() (awsapi.EC2, *fake.EC2)
		hint string
	}{
		{"bad AMI as an API error", func() (awsapi.EC2, *fake.EC2) {
			f := newEC2()
			f.Inject("CreateFleet", fake.APIError("InvalidAMIID.NotFound", "The image id '[ami-1]' does not exist"))
			return f, f
		}, "update the pool's image"},
		{"unauthorized per override", func() (awsapi.EC2, *fake.EC2) {
			f := newEC2()
			f.NoCapacity("", "", "") // every override fails, and is reported refused
			return refusedPerOverride{EC2: f, code: "UnauthorizedOperation", message: "You are not authorized"}, f
		}, "the provision role may not launch instances"},
		{"missing profile", func() (awsapi.EC2, *fake.EC2) {
			f := newEC2()
			f.Inject("CreateFleet", fake.APIError("InvalidIamInstanceProfile.Name", "Invalid IAM Instance Profile name"))
			return f, f
		}, "redeploy the stack"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			client, f := tc.ec2()
			got, err := (&fleet.Launcher{EC2: client, Log: quiet}).Launch(context.Background(), fleet.Request{Pool: pool("on-demand"), Count: 2, Deadline: time.Now().Add(time.Minute)})
			var perm *fleet.PermanentError
			require.ErrorAs(t, err, &perm)
			require.Contains(t, err.Error(), tc.hint)
			require.Empty(t, got)
			require.Equal(t, 1, f.Calls("CreateFleet"), "no retry for a permanent error")
		})
	}
}

func TestRequestShape(t *testing.T) {
	t.Parallel()
	f := newEC2()
	var recorded []fleet.Instance
	got, err := (&fleet.Launcher{EC2: f, Log: quiet}).Launch(context.Background(), fleet.Request{Pool: pool("spot"), Count: 3, Token: "tok",
		Tags: map[string]string{"hangar:run-id": "spoofed", "owner": "me"}, Reserved: map[string]string{"hangar:pool": "p"},
		OnLaunch: func(_ context.Context, l []fleet.Instance) error { recorded = append(recorded, l...); return nil }})
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.Equal(t, got, recorded, "every launched instance is handed over before Launch returns")
	require.Equal(t, "us-east-1a", got[0].AZ)
	require.Equal(t, 2, got[0].VCPU)
	require.Equal(t, "spot", got[0].UsageClass)
	require.Len(t, f.InState(ec2types.InstanceStateNameRunning), 3)
	require.Len(t, f.Fleets(), 1)
	in := f.Fleets()[0]
	require.Equal(t, ec2types.FleetTypeInstant, in.Type)
	require.Len(t, in.LaunchTemplateConfigs[0].Overrides, 4, "every type × subnet")
	require.Equal(t, ec2types.SpotAllocationStrategyPriceCapacityOptimized, in.SpotOptions.AllocationStrategy)
	require.Equal(t, "tok-1", aws.ToString(in.ClientToken))
	tags := map[string]string{}
	for _, tg := range in.TagSpecifications[0].Tags {
		tags[aws.ToString(tg.Key)] = aws.ToString(tg.Value)
	}
	require.Equal(t, map[string]string{"team": "ci", "owner": "me", "hangar:pool": "p", fleet.TagUnrecorded: "true"}, tags,
		"user tags may not set hangar:*; the reserved ones win")
	require.Equal(t, tags, f.Tags(got[0].ID), "the instances carry them")
	require.Equal(t, 1, f.Calls("DescribeInstanceTypes"), "instance sizes asked for once")
}

func TestSpotFallbackThenDeadline(t *testing.T) {
	t.Parallel()
	f := newEC2()
	f.NoCapacity("", "", fake.Spot)
	got, err := (&fleet.Launcher{EC2: f, Log: quiet}).Launch(context.Background(), fleet.Request{Pool: pool("spot-fallback"), Count: 1})
	require.NoError(t, err)
	require.Equal(t, "on-demand", got[0].UsageClass)
	require.Equal(t, 2, f.Calls("CreateFleet"), "one spot request, then on-demand")

	none := newEC2()
	none.NoCapacity("", "", "")
	start := time.Now()
	_, err = (&fleet.Launcher{EC2: none, MaxBackoff: 200 * time.Millisecond, Log: quiet}).Launch(context.Background(),
		fleet.Request{Pool: pool("on-demand"), Count: 1, Deadline: time.Now().Add(2 * time.Second)})
	require.ErrorIs(t, err, fleet.ErrNoCapacity)
	require.Less(t, time.Since(start), 3*time.Second, "gives up at the deadline")
	require.Greater(t, none.Calls("CreateFleet"), 2, "retried with backoff meanwhile")
	require.Empty(t, none.InState(ec2types.InstanceStateNameRunning))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = (&fleet.Launcher{EC2: none, Log: quiet}).Launch(ctx, fleet.Request{Pool: pool("on-demand"), Count: 1})
	require.ErrorIs(t, err, context.Canceled, "a cancelled launch stops waiting at once")

	// The deadline passing during the round after a wait (a slow machine) is still no capacity.
	late := newEC2()
	late.Inject("CreateFleet", fake.APIError("InsufficientInstanceCapacity", "no capacity"), context.DeadlineExceeded)
	_, err = (&fleet.Launcher{EC2: late, MaxBackoff: time.Millisecond, Log: quiet}).Launch(context.Background(), fleet.Request{Pool: pool("on-demand"), Count: 1})
	require.ErrorIs(t, err, fleet.ErrNoCapacity)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
