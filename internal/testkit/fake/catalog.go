package fake

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// InstanceType is one entry of an instance type catalogue.
type InstanceType struct {
	Name            string
	VCPU, MemoryMiB int
	Arch            ec2types.ArchitectureType // x86_64 or arm64
	// Previous marks a previous-generation type; BareMetal a metal one.
	Previous, BareMetal bool
	// OnDemandOnly marks a type that cannot be had on spot.
	OnDemandOnly bool
}

// CatalogTypes returns a small instance type catalogue of both architectures, with what a
// resolution must leave out among the types that fit by size: previous-generation, bare-metal and
// on-demand-only types. The figures are EC2's for the real types; c7i-flex is on-demand only here
// (not on EC2) to have such a type of an ordinary size.
func CatalogTypes() []InstanceType {
	x, arm := ec2types.ArchitectureTypeX8664, ec2types.ArchitectureTypeArm64
	return []InstanceType{
		{Name: "c7i.large", VCPU: 2, MemoryMiB: 4096, Arch: x},
		{Name: "c7i.xlarge", VCPU: 4, MemoryMiB: 8192, Arch: x},
		{Name: "c7i.2xlarge", VCPU: 8, MemoryMiB: 16384, Arch: x},
		{Name: "c7i.4xlarge", VCPU: 16, MemoryMiB: 32768, Arch: x},
		{Name: "c7i.metal-24xl", VCPU: 96, MemoryMiB: 196608, Arch: x, BareMetal: true},
		{Name: "c7i-flex.large", VCPU: 2, MemoryMiB: 4096, Arch: x, OnDemandOnly: true},
		{Name: "c7i-flex.2xlarge", VCPU: 8, MemoryMiB: 16384, Arch: x, OnDemandOnly: true},
		{Name: "c6i.large", VCPU: 2, MemoryMiB: 4096, Arch: x},
		{Name: "c6i.xlarge", VCPU: 4, MemoryMiB: 8192, Arch: x},
		{Name: "c6i.2xlarge", VCPU: 8, MemoryMiB: 16384, Arch: x},
		{Name: "c6i.4xlarge", VCPU: 16, MemoryMiB: 32768, Arch: x},
		{Name: "m7i.large", VCPU: 2, MemoryMiB: 8192, Arch: x},
		{Name: "m7i.xlarge", VCPU: 4, MemoryMiB: 16384, Arch: x},
		{Name: "m7i.2xlarge", VCPU: 8, MemoryMiB: 32768, Arch: x},
		{Name: "r7i.large", VCPU: 2, MemoryMiB: 16384, Arch: x},
		{Name: "t3.micro", VCPU: 2, MemoryMiB: 1024, Arch: x},
		{Name: "t3.medium", VCPU: 2, MemoryMiB: 4096, Arch: x},
		{Name: "m4.large", VCPU: 2, MemoryMiB: 8192, Arch: x, Previous: true},
		{Name: "c4.xlarge", VCPU: 4, MemoryMiB: 7680, Arch: x, Previous: true},
		{Name: "c7g.large", VCPU: 2, MemoryMiB: 4096, Arch: arm},
		{Name: "c7g.xlarge", VCPU: 4, MemoryMiB: 8192, Arch: arm},
		{Name: "c7g.2xlarge", VCPU: 8, MemoryMiB: 16384, Arch: arm},
		{Name: "c7g.4xlarge", VCPU: 16, MemoryMiB: 32768, Arch: arm},
		{Name: "m7g.large", VCPU: 2, MemoryMiB: 8192, Arch: arm},
		{Name: "m7g.xlarge", VCPU: 4, MemoryMiB: 16384, Arch: arm},
		{Name: "m7g.2xlarge", VCPU: 8, MemoryMiB: 32768, Arch: arm},
		{Name: "m7g.4xlarge", VCPU: 16, MemoryMiB: 65536, Arch: arm},
		{Name: "m7g.metal", VCPU: 64, MemoryMiB: 262144, Arch: arm, BareMetal: true},
		{Name: "r7g.xlarge", VCPU: 4, MemoryMiB: 32768, Arch: arm},
		{Name: "r7g.2xlarge", VCPU: 8, MemoryMiB: 65536, Arch: arm},
		{Name: "a1.xlarge", VCPU: 4, MemoryMiB: 8192, Arch: arm, Previous: true},
	}
}

// describeCatalog describes Catalog's types as EC2 does: either the types named, all at once (an
// unknown one is InvalidInstanceType), or those matching every filter, CatalogPage at a time (100
// when 0). It honours every filter fleet.Launcher.Resolve sends (processor-info.supported-
// architecture, current-generation, bare-metal, supported-usage-class, vcpu-info.default-vcpus,
// memory-info.size-in-mib, instance-type) and refuses any other, as EC2 refuses an unknown
// filter, so that a resolution that dropped one would be caught.
func (e *EC2) describeCatalog(in *ec2.DescribeInstanceTypesInput) (*ec2.DescribeInstanceTypesOutput, error) {
	out := &ec2.DescribeInstanceTypesOutput{}
	if len(in.InstanceTypes) > 0 {
		var missing []string
		for _, name := range in.InstanceTypes {
			i := slices.IndexFunc(e.Catalog, func(t InstanceType) bool { return t.Name == string(name) })
			if i < 0 {
				missing = append(missing, string(name))
				continue
			}
			out.InstanceTypes = append(out.InstanceTypes, e.Catalog[i].info())
		}
		if len(missing) > 0 {
			return nil, APIError("InvalidInstanceType", "The following supplied instance types do not exist: ["+strings.Join(missing, ", ")+"]")
		}
		return out, nil
	}
	var match []InstanceType
	for _, t := range e.Catalog {
		ok, err := t.matches(in.Filters)
		if err != nil {
			return nil, err
		}
		if ok {
			match = append(match, t)
		}
	}
	start := 0
	if tok := aws.ToString(in.NextToken); tok != "" {
		n, err := strconv.Atoi(tok)
		if err != nil || n < 0 || n > len(match) {
			return nil, APIError("InvalidNextToken", "the next token "+tok+" is not valid")
		}
		start = n
	}
	size := e.CatalogPage
	if size <= 0 {
		size = 100
	}
	if m := int(aws.ToInt32(in.MaxResults)); m > 0 {
		size = min(size, m)
	}
	end := min(start+size, len(match))
	for _, t := range match[start:end] {
		out.InstanceTypes = append(out.InstanceTypes, t.info())
	}
	if end < len(match) {
		out.NextToken = aws.String(strconv.Itoa(end))
	}
	return out, nil
}

func (t InstanceType) info() ec2types.InstanceTypeInfo {
	usage := []ec2types.UsageClassType{ec2types.UsageClassTypeOnDemand}
	if !t.OnDemandOnly {
		usage = append(usage, ec2types.UsageClassTypeSpot)
	}
	return ec2types.InstanceTypeInfo{InstanceType: ec2types.InstanceType(t.Name),
		VCpuInfo:              &ec2types.VCpuInfo{DefaultVCpus: aws.Int32(int32(t.VCPU))},
		MemoryInfo:            &ec2types.MemoryInfo{SizeInMiB: aws.Int64(int64(t.MemoryMiB))},
		ProcessorInfo:         &ec2types.ProcessorInfo{SupportedArchitectures: []ec2types.ArchitectureType{t.Arch}},
		CurrentGeneration:     aws.Bool(!t.Previous),
		BareMetal:             aws.Bool(t.BareMetal),
		SupportedUsageClasses: usage}
}

// matches reports whether the type matches every filter (any of each filter's values).
func (t InstanceType) matches(filters []ec2types.Filter) (bool, error) {
	info := t.info()
	for _, f := range filters {
		var have []string
		switch name := aws.ToString(f.Name); name {
		case "processor-info.supported-architecture":
			have = []string{string(t.Arch)}
		case "current-generation":
			have = []string{strconv.FormatBool(!t.Previous)}
		case "bare-metal":
			have = []string{strconv.FormatBool(t.BareMetal)}
		case "supported-usage-class":
			for _, u := range info.SupportedUsageClasses {
				have = append(have, string(u))
			}
		case "vcpu-info.default-vcpus":
			have = []string{strconv.Itoa(t.VCPU)}
		case "memory-info.size-in-mib":
			have = []string{strconv.Itoa(t.MemoryMiB)}
		case "instance-type":
			if slices.ContainsFunc(f.Values, func(p string) bool { ok, _ := path.Match(p, t.Name); return ok }) {
				continue
			}
			return false, nil
		default:
			return false, APIError("InvalidParameterValue", fmt.Sprintf("The filter '%s' is invalid", name))
		}
		if !slices.ContainsFunc(have, func(v string) bool { return slices.Contains(f.Values, v) }) {
			return false, nil
		}
	}
	return true, nil
}
