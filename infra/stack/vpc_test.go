package stack_test

import (
	"encoding/json"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/cloudassemblyschema"
	"github.com/aws/jsii-runtime-go"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/infra/config"
	"github.com/hangar-ci/hangar/infra/stack"
)

// vpcConfig is the example config with its pool's subnets found by a lookup of vpc.
func vpcConfig(t *testing.T, vpc config.VPC) *config.Config {
	t.Helper()
	c, err := config.Load("../hangar.example.yaml")
	require.NoError(t, err)
	c.Stack = "hangar-vpc"
	c.Pools[0].Subnets, c.Pools[0].VPC, c.Pools[0].VPCID = nil, &vpc, ""
	require.NoError(t, c.Validate())
	return c
}

var account = &awscdk.Environment{Account: jsii.String("123456789012"), Region: jsii.String("us-east-1")}

// lookedUp is what the CDK CLI's VPC context provider answers for a VPC with two private and one
// public subnet.
var lookedUp = map[string]any{
	"vpcId": "vpc-0123456789abcdef0", "vpcCidrBlock": "10.0.0.0/16", "ownerAccountId": "123456789012",
	"availabilityZones": []string{},
	"subnetGroups": []map[string]any{
		{"name": "Private", "type": "Private", "subnets": []map[string]any{
			{"subnetId": "subnet-0aaaaaaaaaaaaaaa1", "cidr": "10.0.1.0/24", "availabilityZone": "us-east-1a", "routeTableId": "rtb-1"},
			{"subnetId": "subnet-0aaaaaaaaaaaaaaa2", "cidr": "10.0.2.0/24", "availabilityZone": "us-east-1b", "routeTableId": "rtb-2"},
		}},
		{"name": "Public", "type": "Public", "subnets": []map[string]any{
			{"subnetId": "subnet-0bbbbbbbbbbbbbbb1", "cidr": "10.0.101.0/24", "availabilityZone": "us-east-1a", "routeTableId": "rtb-3"},
		}},
	},
}

// TestVPCLookup: a pool may name a VPC instead of subnets. The first synthesis asks for the
// lookup, as it does under the CDK CLI; given the CLI's answer, the pool document lists the
// VPC's subnets of the pool's type, and the pool's own security group is made in that VPC.
func TestVPCLookup(t *testing.T) {
	cfg := vpcConfig(t, config.VPC{ID: "vpc-0123456789abcdef0", SubnetType: config.SubnetsPrivate})
	first := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
	_, err := stack.New(first, cfg, assets, &awscdk.StackProps{Env: account})
	require.NoError(t, err)
	missing := first.Synth(nil).Manifest().Missing
	require.NotNil(t, missing)
	require.Len(t, *missing, 1, "one lookup asked for")
	m := (*missing)[0]
	require.Equal(t, cloudassemblyschema.ContextProvider_VPC_PROVIDER, m.Provider)

	second := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir()), Context: &map[string]any{*m.Key: lookedUp}})
	st, err := stack.New(second, cfg, assets, &awscdk.StackProps{Env: account})
	require.NoError(t, err)
	raw, err := json.Marshal(assertions.Template_FromStack(st, nil).ToJSON())
	require.NoError(t, err)
	var tpl struct {
		Resources map[string]struct {
			Type       string
			Properties map[string]any
		}
	}
	require.NoError(t, json.Unmarshal(raw, &tpl))
	found, group := false, false
	for _, r := range tpl.Resources {
		if r.Type == "AWS::EC2::SecurityGroup" {
			require.Equal(t, "vpc-0123456789abcdef0", r.Properties["VpcId"], "the looked-up VPC")
			group = true
		}
		if r.Type == "AWS::SSM::Parameter" {
			s, ok := r.Properties["Value"].(string)
			if !ok { // the document embeds references: Fn::Join of its parts
				b, _ := json.Marshal(r.Properties["Value"])
				s = string(b)
			}
			require.Contains(t, s, "subnet-0aaaaaaaaaaaaaaa1")
			require.Contains(t, s, "subnet-0aaaaaaaaaaaaaaa2")
			require.NotContains(t, s, "subnet-0bbbbbbbbbbbbbbb1", "only the private subnets")
			found = true
		}
	}
	require.True(t, found, "the pool document is in the template")
	require.True(t, group, "the pool's security group is in the template")
}

func TestVPCLookupErrors(t *testing.T) {
	t.Run("no account", func(t *testing.T) {
		app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
		_, err := stack.New(app, vpcConfig(t, config.VPC{Default: true, SubnetType: config.SubnetsPrivate}), assets, nil)
		require.ErrorContains(t, err, "pool linux-x64: vpc: a VPC lookup needs the stack's account and region")
	})
	t.Run("no subnets of the type", func(t *testing.T) {
		cfg := vpcConfig(t, config.VPC{ID: "vpc-0123456789abcdef0", SubnetType: config.SubnetsIsolated})
		first := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
		_, err := stack.New(first, cfg, assets, &awscdk.StackProps{Env: account})
		require.NoError(t, err)
		key := *(*first.Synth(nil).Manifest().Missing)[0].Key
		app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir()), Context: &map[string]any{key: lookedUp}})
		_, err = stack.New(app, cfg, assets, &awscdk.StackProps{Env: account})
		require.EqualError(t, err, "pool linux-x64: vpc: vpc-0123456789abcdef0 has no isolated subnets (public 1, private 2, isolated 0): set vpc.subnetType")
	})
}
