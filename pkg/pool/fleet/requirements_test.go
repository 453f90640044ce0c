package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// describing counts DescribeInstanceTypes calls to the emulator.
type describing struct {
	*ec2.Client
	calls int
}

func (d *describing) DescribeInstanceTypes(ctx context.Context, in *ec2.DescribeInstanceTypesInput, o ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error) {
	d.calls++
	return d.Client.DescribeInstanceTypes(ctx, in, o...)
}

// TestResolve resolves requirements against the emulator's instance type catalogue and checks
// every chosen type against EC2's own description of it.
func TestResolve(t *testing.T) {
	testbed.Require(t)
	ctx := testbed.Context(t, time.Minute)
	client := ec2.NewFromConfig(testbed.AWSConfig(t))
	tests := []struct {
		name   string
		req    pooldoc.Requirements
		market string
		limit  int
		err    string
	}{
		{name: "x64 small", req: pooldoc.Requirements{Arch: "x64", VCPU: pooldoc.Range{Min: 2, Max: 2}, MemoryMiB: pooldoc.Range{Min: 4096, Max: 8192}}, limit: 10},
		{name: "arm64 unbounded", req: pooldoc.Requirements{Arch: "arm64", VCPU: pooldoc.Range{Min: 4}, MemoryMiB: pooldoc.Range{Min: 16384}, MaxTypes: 5}, limit: 5},
		{name: "on-demand", req: pooldoc.Requirements{Arch: "x64", VCPU: pooldoc.Range{Min: 8, Max: 16}}, market: pooldoc.MarketOnDemand, limit: 10},
		{name: "nothing fits", req: pooldoc.Requirements{Arch: "x64", VCPU: pooldoc.Range{Min: 2, Max: 2}, MemoryMiB: pooldoc.Range{Min: 1 << 20}},
			err: "pool p: instanceRequirements: no current-generation x64 instance type offered for spot has 2 to 2 vCPU and at least 1048576 MiB of memory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			market := tc.market
			if market == "" {
				market = pooldoc.MarketSpot
			}
			req := tc.req
			doc := &pooldoc.Document{Name: "p", Market: market, InstanceRequirements: &req}
			ec := &describing{Client: client}
			l := &Launcher{EC2: ec}
			err := l.Resolve(ctx, doc)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.NotEmpty(t, doc.InstanceTypes)
			require.LessOrEqual(t, len(doc.InstanceTypes), tc.limit)
			infos, err := client.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: typesOf(doc.InstanceTypes)})
			require.NoError(t, err)
			require.Len(t, infos.InstanceTypes, len(doc.InstanceTypes))
			size := map[string][2]int{}
			for _, it := range infos.InstanceTypes {
				vcpu, mem := int(aws.ToInt32(it.VCpuInfo.DefaultVCpus)), int(aws.ToInt64(it.MemoryInfo.SizeInMiB))
				size[string(it.InstanceType)] = [2]int{vcpu, mem}
				require.True(t, req.VCPU.Contains(vcpu), "%s: %d vCPU", it.InstanceType, vcpu)
				require.True(t, req.MemoryMiB.Contains(mem), "%s: %d MiB", it.InstanceType, mem)
				require.Contains(t, it.ProcessorInfo.SupportedArchitectures, ec2types.ArchitectureType(req.EC2Arch()), string(it.InstanceType))
				require.False(t, aws.ToBool(it.BareMetal), string(it.InstanceType))
				require.True(t, aws.ToBool(it.CurrentGeneration), string(it.InstanceType))
			}
			for i := 1; i < len(doc.InstanceTypes); i++ {
				a, b := size[doc.InstanceTypes[i-1]], size[doc.InstanceTypes[i]]
				require.True(t, a[0] < b[0] || a[0] == b[0] && a[1] <= b[1], "smallest first: %v", doc.InstanceTypes)
			}

			// Once per Launcher: another document with the same requirements asks EC2 nothing.
			calls := ec.calls
			again := &pooldoc.Document{Name: "q", Market: market, InstanceRequirements: &req}
			require.NoError(t, l.Resolve(ctx, again))
			require.Equal(t, doc.InstanceTypes, again.InstanceTypes)
			require.Equal(t, calls, ec.calls)
		})
	}
}

func TestResolveLeavesNamedTypes(t *testing.T) {
	doc := &pooldoc.Document{Name: "p", InstanceTypes: []string{"c7i.large"}}
	require.NoError(t, (&Launcher{}).Resolve(context.Background(), doc))
	require.Equal(t, []string{"c7i.large"}, doc.InstanceTypes)
}

func typesOf(names []string) []ec2types.InstanceType {
	out := make([]ec2types.InstanceType, len(names))
	for i, n := range names {
		out[i] = ec2types.InstanceType(n)
	}
	return out
}
