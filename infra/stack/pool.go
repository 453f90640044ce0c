package stack

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsssm"
	"github.com/aws/jsii-runtime-go"

	"github.com/hangar-ci/hangar/infra/config"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// pool is one pool's resources.
type pool struct {
	cfg      *config.Pool
	queue    awssqs.Queue
	dlq      awssqs.Queue
	template awsec2.CfnLaunchTemplate
	doc      awsssm.StringParameter
	// image is the AMI the template names (a token when an SSM parameter names it), and groups
	// the template's security groups: the only ones launches may use (roles.go).
	image  *string
	groups []*string
}

func newPool(h *hangar, p *config.Pool) (*pool, error) {
	id := func(s string) *string { return jsii.String("Pool-" + p.Name + "-" + s) }
	out := &pool{cfg: p}
	out.dlq = awssqs.NewQueue(h.stack, id("DeadLetters"), &awssqs.QueueProps{
		QueueName:       jsii.String(h.cfg.Stack + "-" + p.Name + "-dlq"),
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
		RetentionPeriod: awscdk.Duration_Days(jsii.Number(14)),
	})
	out.queue = awssqs.NewQueue(h.stack, id("Queue"), &awssqs.QueueProps{
		QueueName:         jsii.String(h.cfg.Stack + "-" + p.Name),
		Encryption:        awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:        jsii.Bool(true),
		VisibilityTimeout: awscdk.Duration_Seconds(jsii.Number(30)),
		// An offer lives as long as its instance's idle or stopped deadline; SQS keeps 14 days
		// at most, and a longer-stopped instance is republished by refresh.
		RetentionPeriod: awscdk.Duration_Days(jsii.Number(14)),
		// Offers held and released by selections are received many times in normal operation
		// (docs/design.md §8): the redrive only backs up explicit dead-lettering of poison.
		DeadLetterQueue: &awssqs.DeadLetterQueue{Queue: out.dlq, MaxReceiveCount: jsii.Number(50)},
	})
	ag := h.agents[p.Image.Arch]
	imageID := jsii.String(p.Image.AMI)
	if p.Image.SSMParameter != "" {
		// Resolved at each deploy: a redeploy picks up the parameter's current AMI.
		param := awscdk.NewCfnParameter(h.stack, id("Image"), &awscdk.CfnParameterProps{
			Type:        jsii.String("AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"),
			Default:     jsii.String(p.Image.SSMParameter),
			Description: jsii.String("the AMI of pool " + p.Name),
		})
		imageID = param.ValueAsString()
	}
	out.image = imageID
	var subnets []pooldoc.Subnet
	vpcID := p.VPCID
	if p.VPC != nil {
		var err error
		if subnets, vpcID, err = lookupSubnets(h, p); err != nil {
			return nil, err
		}
	}
	out.groups = *jsii.Strings(p.SecurityGroups...)
	if len(p.SecurityGroups) == 0 {
		out.groups = []*string{newSecurityGroup(h, p, vpcID).AttrGroupId()}
	}
	out.template = awsec2.NewCfnLaunchTemplate(h.stack, id("Template"), &awsec2.CfnLaunchTemplateProps{
		LaunchTemplateName: jsii.String(h.cfg.Stack + "-" + p.Name),
		LaunchTemplateData: &awsec2.CfnLaunchTemplate_LaunchTemplateDataProperty{
			ImageId:                           imageID,
			IamInstanceProfile:                &awsec2.CfnLaunchTemplate_IamInstanceProfileProperty{Arn: h.roles.profile.AttrArn()},
			InstanceInitiatedShutdownBehavior: jsii.String("terminate"),
			SecurityGroupIds:                  &out.groups,
			MetadataOptions: &awsec2.CfnLaunchTemplate_MetadataOptionsProperty{
				HttpEndpoint: jsii.String("enabled"), HttpTokens: jsii.String("required"),
				HttpPutResponseHopLimit: jsii.Number(float64(p.MetadataHopLimit)),
				HttpProtocolIpv6:        jsii.String("disabled"), InstanceMetadataTags: jsii.String("disabled"),
			},
			BlockDeviceMappings: &[]interface{}{&awsec2.CfnLaunchTemplate_BlockDeviceMappingProperty{
				DeviceName: jsii.String("/dev/xvda"),
				Ebs: &awsec2.CfnLaunchTemplate_EbsProperty{
					VolumeSize: jsii.Number(float64(p.Disk.SizeGiB)), VolumeType: jsii.String("gp3"),
					Encrypted: jsii.Bool(true), DeleteOnTermination: jsii.Bool(true),
				},
			}},
			UserData: awscdk.Fn_Base64(userData(h, p, ag)),
		},
	})
	spec := p.SpecHash(ag.sha256)
	body, err := p.Document(config.Deployed{
		Partition: *h.stack.Partition(), Region: *h.stack.Region(), Account: *h.stack.Account(),
		Table: *h.table.t.TableName(), QueueURL: *out.queue.QueueUrl(), DeadLetterURL: *out.dlq.QueueUrl(),
		TemplateID: *out.template.Ref(), TemplateVer: *out.template.AttrLatestVersionNumber(),
		SpecHash: spec, Subnets: subnets, GitHubURL: h.cfg.GitHub.ServerURL,
		StackLabel: stackLabel(h), ReturnsQueueURL: returnsQueueURL(h), HistoryDays: h.cfg.History.Days,
		JobsQueueURL: jobsQueueURL(h, false), JobsDeadLetterURL: jobsQueueURL(h, true),
		Repositories: h.cfg.GitHub.Repositories, Installations: h.cfg.GitHub.Installations,
		StackCap: h.cfg.StackCap(),
	}).JSON()
	if err != nil {
		panic(fmt.Sprintf("pool %s: encode its document: %v", p.Name, err)) // a Doc always encodes
	}
	out.doc = awsssm.NewStringParameter(h.stack, id("Document"), &awsssm.StringParameterProps{
		ParameterName: jsii.String(pooldoc.ParameterName(h.cfg.Stack, p.Name)),
		StringValue:   jsii.String(string(body)),
		Description:   jsii.String("Hangar pool document (docs/design.md §9)"),
		Tier:          awsssm.ParameterTier_STANDARD,
	})
	return out, nil
}

// newSecurityGroup is the group of a pool that names none: no ingress at all, so that nothing
// reaches a job's services, not even another instance of the stack (the VPC's default group
// lets its members reach each other); every egress, for GitHub, AWS and what jobs download.
func newSecurityGroup(h *hangar, p *config.Pool, vpcID string) awsec2.CfnSecurityGroup {
	return awsec2.NewCfnSecurityGroup(h.stack, jsii.String("Pool-"+p.Name+"-SecurityGroup"), &awsec2.CfnSecurityGroupProps{
		GroupDescription: jsii.String("Hangar " + h.cfg.Stack + " pool " + p.Name + ": no ingress"),
		VpcId:            jsii.String(vpcID),
		SecurityGroupEgress: &[]interface{}{
			&awsec2.CfnSecurityGroup_EgressProperty{IpProtocol: jsii.String("-1"), CidrIp: jsii.String("0.0.0.0/0"), Description: jsii.String("every egress, IPv4")},
			&awsec2.CfnSecurityGroup_EgressProperty{IpProtocol: jsii.String("-1"), CidrIpv6: jsii.String("::/0"), Description: jsii.String("every egress, IPv6")},
		},
	})
}

// stackLabel and returnsQueueURL are what the documents of pools with jobs add ("" without
// label-routed jobs: Document leaves them out of other pools').
func stackLabel(h *hangar) string {
	if h.cfg.App == nil {
		return ""
	}
	return h.cfg.App.Label
}

// jobsQueueURL is the stack's jobs queue's URL, or its dead-letter queue's ("" without jobs).
func jobsQueueURL(h *hangar, deadLetters bool) string {
	switch {
	case h.jobs == nil:
		return ""
	case deadLetters:
		return *h.jobs.dlq.QueueUrl()
	}
	return *h.jobs.queue.QueueUrl()
}

func returnsQueueURL(h *hangar) string {
	if h.jobs == nil {
		return ""
	}
	return *h.jobs.returns.QueueUrl()
}
