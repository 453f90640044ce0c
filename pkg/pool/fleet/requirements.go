package fleet

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// requirementsKey is what a resolution depends on.
type requirementsKey struct {
	req  pooldoc.Requirements
	spot bool
}

// Resolve fills in the instance types of a pool that chooses them by size
// (instanceRequirements): every current-generation type of its arch, not bare metal, offered in
// its market, whose vCPU count and memory fall in the ranges, smallest first (vCPU, then
// memory, then name), at most the requirements' limit. A document that names its types is left
// as it is. Each resolution is made once per Launcher (a refresh function keeps it across
// invocations).
func (l *Launcher) Resolve(ctx context.Context, doc *pooldoc.Document) error {
	if !doc.ChoosesTypesBySize() {
		return nil
	}
	r := doc.InstanceRequirements
	key := requirementsKey{*r, doc.Market != pooldoc.MarketOnDemand}
	l.mu.Lock()
	types, ok := l.resolved[key]
	l.mu.Unlock()
	if ok {
		doc.InstanceTypes = slices.Clone(types)
		return nil
	}
	usage := "on-demand"
	if key.spot {
		usage = "spot"
	}
	filters := []ec2types.Filter{
		{Name: aws.String("processor-info.supported-architecture"), Values: []string{r.EC2Arch()}},
		{Name: aws.String("current-generation"), Values: []string{"true"}},
		{Name: aws.String("bare-metal"), Values: []string{"false"}},
		{Name: aws.String("supported-usage-class"), Values: []string{usage}},
	}
	if r.VCPU.Max != 0 && r.VCPU.Max-r.VCPU.Min < 200 { // a bounded range is asked for exactly (fewer pages)
		var counts []string
		for v := r.VCPU.Min; v <= r.VCPU.Max; v++ {
			counts = append(counts, strconv.Itoa(v))
		}
		filters = append(filters, ec2types.Filter{Name: aws.String("vcpu-info.default-vcpus"), Values: counts})
	}
	var fit []ec2types.InstanceTypeInfo
	pages := ec2.NewDescribeInstanceTypesPaginator(l.EC2, &ec2.DescribeInstanceTypesInput{Filters: filters})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("pool %s: resolve instanceRequirements: describe instance types: %w", doc.Name, err)
		}
		for _, it := range page.InstanceTypes {
			if it.VCpuInfo == nil || it.MemoryInfo == nil {
				continue
			}
			if r.VCPU.Contains(int(aws.ToInt32(it.VCpuInfo.DefaultVCpus))) && r.MemoryMiB.Contains(int(aws.ToInt64(it.MemoryInfo.SizeInMiB))) {
				fit = append(fit, it)
			}
		}
	}
	if len(fit) == 0 {
		return fmt.Errorf("pool %s: instanceRequirements: no current-generation %s instance type offered for %s has %s vCPU and %s MiB of memory",
			doc.Name, r.Arch, usage, describeRange(r.VCPU), describeRange(r.MemoryMiB))
	}
	slices.SortFunc(fit, func(a, b ec2types.InstanceTypeInfo) int {
		return cmp.Or(cmp.Compare(aws.ToInt32(a.VCpuInfo.DefaultVCpus), aws.ToInt32(b.VCpuInfo.DefaultVCpus)),
			cmp.Compare(aws.ToInt64(a.MemoryInfo.SizeInMiB), aws.ToInt64(b.MemoryInfo.SizeInMiB)),
			cmp.Compare(a.InstanceType, b.InstanceType))
	})
	fit = fit[:min(len(fit), r.Limit())]
	types = make([]string, len(fit))
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.specs == nil {
		l.specs = map[string]ec2types.InstanceTypeInfo{}
	}
	if l.resolved == nil {
		l.resolved = map[requirementsKey][]string{}
	}
	for i, it := range fit {
		types[i] = string(it.InstanceType)
		l.specs[types[i]] = it // their sizes are known now: no second describe at launch
	}
	l.resolved[key] = types
	doc.InstanceTypes = slices.Clone(types)
	l.log().Info("instance types resolved from the pool's requirements", "pool", doc.Name, "types", types)
	return nil
}

// describeRange writes a range for a message: "2 to 4", "at least 2".
func describeRange(r pooldoc.Range) string {
	if r.Max == 0 {
		return "at least " + strconv.Itoa(r.Min)
	}
	return strconv.Itoa(r.Min) + " to " + strconv.Itoa(r.Max)
}
