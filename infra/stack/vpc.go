package stack

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/jsii-runtime-go"

	"github.com/hangar-ci/hangar/infra/config"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// lookupSubnets finds a pool's subnets, and their VPC's id, by its VPC lookup. The CDK CLI performs the lookup (and
// caches it in cdk.context.json); until it has, CDK answers with a dummy VPC and the CLI
// synthesizes again, so a dummy never deploys.
func lookupSubnets(h *hangar, p *config.Pool) ([]pooldoc.Subnet, string, error) {
	if *awscdk.Token_IsUnresolved(h.stack.Account()) || *awscdk.Token_IsUnresolved(h.stack.Region()) {
		return nil, "", fmt.Errorf("pool %s: vpc: a VPC lookup needs the stack's account and region: deploy with npx cdk (which sets them), or list subnets", p.Name)
	}
	opts := &awsec2.VpcLookupOptions{}
	if p.VPC.ID != "" {
		opts.VpcId = jsii.String(p.VPC.ID)
	} else {
		opts.IsDefault = jsii.Bool(true)
	}
	vpc := awsec2.Vpc_FromLookup(h.stack, jsii.String("Pool-"+p.Name+"-Vpc"), opts)
	var found *[]awsec2.ISubnet
	switch p.VPC.SubnetType {
	case config.SubnetsPublic:
		found = vpc.PublicSubnets()
	case config.SubnetsIsolated:
		found = vpc.IsolatedSubnets()
	default:
		found = vpc.PrivateSubnets()
	}
	var out []pooldoc.Subnet
	if found != nil {
		for _, s := range *found {
			out = append(out, pooldoc.Subnet{ID: *s.SubnetId(), AZ: *s.AvailabilityZone()})
		}
	}
	if len(out) == 0 {
		return nil, "", fmt.Errorf("pool %s: vpc: %s has no %s subnets (public %d, private %d, isolated %d): set vpc.subnetType",
			p.Name, *vpc.VpcId(), p.VPC.SubnetType, len(*vpc.PublicSubnets()), len(*vpc.PrivateSubnets()), len(*vpc.IsolatedSubnets()))
	}
	return out, *vpc.VpcId(), nil
}
