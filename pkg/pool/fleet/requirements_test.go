package fleet_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// TestResolve resolves requirements against the fake EC2's instance type catalogue (which holds,
// among the types that fit by size, previous-generation, bare-metal and on-demand-only ones, and
// answers a few types a page) and checks every chosen type against EC2's own description of it.
func TestResolve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name   string
		req    pooldoc.Requirements
		market string
		want   []string
		err    string
	}{
		{name: "x64 small", req: pooldoc.Requirements{Arch: "x64", VCPU: pooldoc.Range{Min: 2, Max: 2}, MemoryMiB: pooldoc.Range{Min: 4096, Max: 8192}},
			want: []string{"c6i.large", "c7i.large", "t3.medium", "m7i.large"}},
		{name: "arm64 unbounded", req: pooldoc.Requirements{Arch: "arm64", VCPU: pooldoc.Range{Min: 4}, MemoryMiB: pooldoc.Range{Min: 16384}, MaxTypes: 5},
			want: []string{"m7g.xlarge", "r7g.xlarge", "c7g.2xlarge", "m7g.2xlarge", "r7g.2xlarge"}},
		{name: "on-demand", req: pooldoc.Requirements{Arch: "x64", VCPU: pooldoc.Range{Min: 8, Max: 16}}, market: pooldoc.MarketOnDemand,
			want: []string{"c6i.2xlarge", "c7i-flex.2xlarge", "c7i.2xlarge", "m7i.2xlarge", "c6i.4xlarge", "c7i.4xlarge"}},
		{name: "nothing fits", req: pooldoc.Requirements{Arch: "x64", VCPU: pooldoc.Range{Min: 2, Max: 2}, MemoryMiB: pooldoc.Range{Min: 1 << 20}},
			err: "pool p: instanceRequirements: no current-generation x64 instance type offered for spot has 2 to 2 vCPU and at least 1048576 MiB of memory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			market := tc.market
			if market == "" {
				market = pooldoc.MarketSpot
			}
			req := tc.req
			doc := &pooldoc.Document{Name: "p", Market: market, InstanceRequirements: &req}
			ec := &fake.EC2{Catalog: fake.CatalogTypes(), CatalogPage: 3}
			l := &fleet.Launcher{EC2: ec, Log: quiet}
			err := l.Resolve(ctx, doc)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, doc.InstanceTypes, "every fitting type, smallest first, up to the limit")
			require.LessOrEqual(t, len(doc.InstanceTypes), req.Limit())
			infos, err := ec.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: typesOf(doc.InstanceTypes)})
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
				require.Contains(t, it.SupportedUsageClasses, ec2types.UsageClassType(market), string(it.InstanceType))
			}
			for i := 1; i < len(doc.InstanceTypes); i++ {
				a, b := size[doc.InstanceTypes[i-1]], size[doc.InstanceTypes[i]]
				require.True(t, a[0] < b[0] || a[0] == b[0] && a[1] <= b[1], "smallest first: %v", doc.InstanceTypes)
			}

			// Once per Launcher: another document with the same requirements asks EC2 nothing.
			calls := ec.Calls("DescribeInstanceTypes")
			again := &pooldoc.Document{Name: "q", Market: market, InstanceRequirements: &req}
			require.NoError(t, l.Resolve(ctx, again))
			require.Equal(t, doc.InstanceTypes, again.InstanceTypes)
			require.Equal(t, calls, ec.Calls("DescribeInstanceTypes"))
		})
	}
}

func TestResolveLeavesNamedTypes(t *testing.T) {
	t.Parallel()
	doc := &pooldoc.Document{Name: "p", InstanceTypes: []string{"c7i.large"}}
	require.NoError(t, (&fleet.Launcher{}).Resolve(context.Background(), doc))
	require.Equal(t, []string{"c7i.large"}, doc.InstanceTypes)
}

func typesOf(names []string) []ec2types.InstanceType {
	out := make([]ec2types.InstanceType, len(names))
	for i, n := range names {
		out[i] = ec2types.InstanceType(n)
	}
	return out
}
