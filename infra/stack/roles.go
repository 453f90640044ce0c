package stack

import (
	"maps"
	"slices"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// githubOIDC is GitHub Actions' OIDC issuer.
const githubOIDC = "token.actions.githubusercontent.com"

// sourceInstance is the IAM policy variable naming the instance whose role signs a request.
const sourceInstance = "${ec2:SourceInstanceARN}"

// roles are the stack's identities: three, and two more when it serves label-routed jobs.
type roles struct {
	instance awsiam.Role
	profile  awsiam.CfnInstanceProfile
	workflow awsiam.Role // the provision and release steps, through GitHub OIDC
	refresh  awsiam.Role
	// ingress and dispatch are the label-routed jobs' functions' (jobroles.go); nil when no
	// pool serves jobs.
	ingress, dispatch awsiam.Role
}

func newRoles(h *hangar) *roles {
	r := &roles{}
	r.instance = awsiam.NewRole(h.stack, jsii.String("InstanceRole"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("ec2.amazonaws.com"), nil),
		Description: jsii.String("Hangar instances: the agent's own item, its own tokens, its own termination"),
	})
	r.profile = awsiam.NewCfnInstanceProfile(h.stack, jsii.String("InstanceProfile"), &awsiam.CfnInstanceProfileProps{
		Roles: &[]interface{}{r.instance.RoleName()},
	})

	providerArn := jsii.String(h.cfg.GitHub.OIDCProviderARN)
	if *providerArn == "" {
		p := awsiam.NewCfnOIDCProvider(h.stack, jsii.String("GitHubOIDC"), &awsiam.CfnOIDCProviderProps{
			Url:          jsii.String("https://" + githubOIDC),
			ClientIdList: jsii.Strings("sts.amazonaws.com"),
		})
		providerArn = p.AttrArn()
	}
	var subs []*string
	for _, repo := range h.cfg.GitHub.Repositories {
		subs = append(subs, jsii.String("repo:"+repo+":*")) // owner/* becomes repo:owner/*:*
	}
	r.workflow = awsiam.NewRole(h.stack, jsii.String("WorkflowRole"), &awsiam.RoleProps{
		AssumedBy: awsiam.NewWebIdentityPrincipal(providerArn, &map[string]interface{}{
			"StringEquals": map[string]interface{}{githubOIDC + ":aud": "sts.amazonaws.com"},
			"StringLike":   map[string]interface{}{githubOIDC + ":sub": subs},
		}),
		Description: jsii.String("Hangar provision and release steps, for the workflows of " + strings.Join(h.cfg.GitHub.Repositories, ", ")),
	})
	r.refresh = awsiam.NewRole(h.stack, jsii.String("RefreshRole"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("Hangar refresh function"),
	})
	if h.cfg.ServesJobs() {
		r.newJobRoles(h)
	}
	return r
}

// itemActions are every DynamoDB action that reads or writes an item by its key.
var itemActions = []string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:PutItem",
	"dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "dynamodb:ConditionCheckItem",
	"dynamodb:PartiQLSelect", "dynamodb:PartiQLInsert", "dynamodb:PartiQLUpdate", "dynamodb:PartiQLDelete"}

// deny is statement's explicit refusal, which no allow overrides.
func deny(actions []string, resources []*string, conditions map[string]interface{}) awsiam.PolicyStatement {
	s := statement(actions, resources, conditions)
	s.SetEffect(awsiam.Effect_DENY)
	return s
}

func statement(actions []string, resources []*string, conditions map[string]interface{}) awsiam.PolicyStatement {
	s := awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{Actions: jsii.Strings(actions...), Resources: &resources})
	if conditions != nil {
		s.AddConditions(&conditions)
	}
	return s
}

// grant writes every policy, once the pools exist.
func (r *roles) grant(h *hangar) {
	tableArn := h.table.t.TableArn()
	poolDocs, _ := poolDocuments(h)
	bells := doorbells(h)

	// The instance: its own item (the partition key is its ARN), of which it writes only the
	// agent's attributes; its own doorbell, which alone brings it runner secrets; its pool
	// document; the agent. No EC2 action: the agent ends its instance by powering it off (the
	// launch template makes that a termination), so a compromised instance can end no other.
	agentAttrs := append([]string{state.AttrARN, "version"}, state.AgentAttributes...)
	own := map[string]interface{}{"ForAllValues:StringEquals": map[string]interface{}{"dynamodb:LeadingKeys": []string{sourceInstance}}}
	for _, s := range []awsiam.PolicyStatement{
		statement([]string{"dynamodb:GetItem"}, []*string{tableArn}, own),
		statement([]string{"dynamodb:UpdateItem"}, []*string{tableArn}, map[string]interface{}{
			"ForAllValues:StringEquals": map[string]interface{}{"dynamodb:LeadingKeys": []string{sourceInstance}, "dynamodb:Attributes": agentAttrs},
		}),
		statement([]string{"ssm:GetParameter"}, []*string{poolDocs}, nil),
		// Its own doorbell only: another's carries that instance's runner secrets (hand-overs),
		// and silencing it would slow that instance down.
		statement([]string{"sqs:ReceiveMessage", "sqs:DeleteMessage"}, []*string{bells}, map[string]interface{}{
			"StringEquals": map[string]interface{}{"aws:ResourceTag/" + doorbell.TagKey: sourceInstance},
		}),
		// It makes its own doorbell as it boots (the workflows' steps may make none), tagged
		// with its own ARN and nothing else.
		statement([]string{"sqs:CreateQueue", "sqs:TagQueue"}, []*string{bells}, map[string]interface{}{
			"StringEquals":              map[string]interface{}{"aws:RequestTag/" + doorbell.TagKey: sourceInstance},
			"ForAllValues:StringEquals": map[string]interface{}{"aws:TagKeys": []string{doorbell.TagKey}},
		}),
		// A tag says whose a doorbell is, once: no instance re-tags another's with its own ARN
		// to hear what is sent to it.
		deny([]string{"sqs:TagQueue", "sqs:UntagQueue"}, []*string{bells}, map[string]interface{}{
			"Null":            map[string]interface{}{"aws:ResourceTag/" + doorbell.TagKey: "false"},
			"StringNotEquals": map[string]interface{}{"aws:ResourceTag/" + doorbell.TagKey: sourceInstance},
		}),
	} {
		r.instance.AddToPolicy(s)
	}
	for _, arch := range slices.Sorted(maps.Keys(h.agents)) { // in order: the same config, the same template
		ag := h.agents[arch]
		r.instance.AddToPolicy(statement([]string{"s3:GetObject"}, []*string{ag.asset.Bucket().ArnForObjects(ag.asset.S3ObjectKey()),
			ag.helper.Bucket().ArnForObjects(ag.helper.S3ObjectKey())}, nil))
	}

	// The control plane: the workflows' steps, refresh and the dispatcher move instances alike,
	// from the same statements.
	for _, s := range controlPlane(h, r) {
		for _, role := range r.controllers() {
			role.AddToPolicy(s)
		}
	}
	for _, role := range r.claimers() {
		role.AddToPolicy(startAndTerminate(h))
	}
	// The label door's records of accepted webhook events are the webhook's and the
	// dispatcher's alone: a workflow or refresh that wrote one could make a job look handled
	// (it is never placed) or forge its events.
	labelRecords := awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{Effect: awsiam.Effect_DENY,
		Actions: jsii.Strings(itemActions...), Resources: &[]*string{tableArn}})
	labelRecords.AddCondition(jsii.String("ForAnyValue:StringLike"), map[string]interface{}{"dynamodb:LeadingKeys": []string{webhookItems}})
	r.workflow.AddToPolicy(labelRecords)
	r.refresh.AddToPolicy(labelRecords)
	// Refresh by hand (the action's mode: refresh): the workflows may run the stack's refresh
	// function, and no other: not the events function, so they cannot forge EC2's events.
	r.workflow.AddToPolicy(statement([]string{"lambda:InvokeFunction"}, []*string{h.arn("lambda", "function:"+pooldoc.RefreshFunction(h.cfg.Stack))}, nil))
	r.refresh.AddToPolicy(statement([]string{"ec2:StopInstances", "ec2:TerminateInstances"}, []*string{h.arn("ec2", "instance/*")},
		map[string]interface{}{"StringEquals": stackTag(h)}))
	// Doorbells are made with the instances the stack's functions launch, tagged (by their code)
	// with the instance's ARN and nothing else, and deleted with them. No role a workflow can
	// assume may make, tag or delete one.
	for _, role := range r.functions() {
		tagged := map[string]interface{}{
			"Null":                      map[string]interface{}{"aws:RequestTag/" + doorbell.TagKey: "false"},
			"ForAllValues:StringEquals": map[string]interface{}{"aws:TagKeys": []string{doorbell.TagKey}},
		}
		role.AddToPolicy(statement([]string{"sqs:CreateQueue"}, []*string{bells}, tagged))
		// Tagging only in making one: a doorbell that has its tag keeps it.
		role.AddToPolicy(statement([]string{"sqs:TagQueue"}, []*string{bells}, map[string]interface{}{
			"Null":                      map[string]interface{}{"aws:RequestTag/" + doorbell.TagKey: "false", "aws:ResourceTag/" + doorbell.TagKey: "true"},
			"ForAllValues:StringEquals": map[string]interface{}{"aws:TagKeys": []string{doorbell.TagKey}},
		}))
		role.AddToPolicy(statement([]string{"sqs:DeleteQueue"}, []*string{bells}, nil))
	}
	// The hourly sweep of doorbells left without a live instance lists them by name.
	r.refresh.AddToPolicy(statement([]string{"sqs:ListQueues"}, []*string{h.arn("sqs", "*")}, nil))
	if h.jobs != nil {
		r.grantJobs(h)
	}
}

// controllers are the roles that move instances through their states: the workflow role, the
// refresh role and, with label-routed jobs, the dispatcher's.
func (r *roles) controllers() []awsiam.Role {
	out := []awsiam.Role{r.workflow, r.refresh}
	if r.dispatch != nil {
		out = append(out, r.dispatch)
	}
	return out
}

// functions are the stack's own functions' roles that move instances: refresh and, with
// label-routed jobs, the dispatcher's. No workflow can assume them.
func (r *roles) functions() []awsiam.Role {
	out := []awsiam.Role{r.refresh}
	if r.dispatch != nil {
		out = append(out, r.dispatch)
	}
	return out
}

// claimers are the roles that hand instances their assignments (claims, with the runner secret
// sent to the instance's doorbell): they start a claimed stopped instance and terminate one that
// failed. Refresh only stops and terminates (grant).
func (r *roles) claimers() []awsiam.Role {
	out := []awsiam.Role{r.workflow}
	if r.dispatch != nil {
		out = append(out, r.dispatch)
	}
	return out
}

// stackTag is the condition on an existing resource being the stack's (its hangar:stack tag).
func stackTag(h *hangar) map[string]interface{} {
	return map[string]interface{}{"aws:ResourceTag/" + fleet.TagStack: h.cfg.Stack}
}

// controlPlane are the statements every role that moves instances holds (controllers): the
// table, the pools' queues and documents, the doorbells, and launches from the stack's
// templates (launches).
func controlPlane(h *hangar, r *roles) []awsiam.PolicyStatement {
	tableArn := h.table.t.TableArn()
	indexes := h.arn("dynamodb", "table/"+h.cfg.Stack+"-instances/index/*")
	poolDocs, poolPath := poolDocuments(h)
	var queues, templates, images, groups []*string
	for _, p := range h.pools {
		queues = append(queues, p.queue.QueueArn(), p.dlq.QueueArn())
		templates = append(templates, h.arn("ec2", "launch-template/"+*p.template.Ref()))
		images = append(images, awsArn(h, "ec2", "", "image/"+*p.image))
		for _, g := range p.groups {
			groups = append(groups, h.arn("ec2", "security-group/"+*g))
		}
	}
	bells := doorbells(h)
	common := []awsiam.PolicyStatement{
		statement([]string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:UpdateItem", "dynamodb:PutItem", "dynamodb:Query"},
			[]*string{tableArn, indexes}, nil),
		statement([]string{"sqs:SendMessage", "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"},
			queues, nil),
		statement([]string{"ssm:GetParameter", "ssm:GetParametersByPath"}, []*string{poolDocs, poolPath}, nil),
		// Doorbells: rung, and handed secrets once their tag says they are the instance's
		// (ListQueueTags). Making and deleting them is the functions' (grant) and the instances'.
		statement([]string{"sqs:SendMessage", "sqs:ListQueueTags"}, []*string{bells}, nil),
		// Launches: see launches.
		statement([]string{"ec2:CreateTags"}, []*string{h.arn("ec2", "instance/*"), h.arn("ec2", "volume/*"), h.arn("ec2", "fleet/*")},
			map[string]interface{}{"StringEquals": map[string]interface{}{"ec2:CreateAction": []string{"CreateFleet", "RunInstances"}}}),
		statement([]string{"ec2:DeleteTags"}, []*string{h.arn("ec2", "instance/*")}, map[string]interface{}{
			"StringEquals":              stackTag(h),
			"ForAllValues:StringEquals": map[string]interface{}{"aws:TagKeys": []string{fleet.TagUnrecorded}},
		}),
		statement([]string{"ec2:DescribeInstances", "ec2:DescribeInstanceTypes"}, []*string{jsii.String("*")}, nil),
		// Prices of what is launched, recorded in its item for the operator's cost views:
		// public figures, read-only.
		statement([]string{"ec2:DescribeSpotPriceHistory", "pricing:GetProducts"}, []*string{jsii.String("*")}, nil),
		// The instance profile's role, to EC2 alone, and no other role: launches use the
		// templates' profile (the launch statements admit no other template).
		statement([]string{"iam:PassRole"}, []*string{r.instance.RoleArn()}, map[string]interface{}{
			"StringEquals": map[string]interface{}{"iam:PassedToService": "ec2.amazonaws.com"},
		}),
	}
	return append(common, launches(h, templates, images, groups)...)
}

// doorbells are the ARNs of the stack's doorbells (package doorbell): queues named for the stack
// and the instance, tagged with the instance's ARN.
func doorbells(h *hangar) *string { return h.arn("sqs", doorbell.Prefix(h.cfg.Stack)+"*") }

// poolDocuments are the ARNs of the stack's pool documents (GetParameter) and of their path
// (GetParametersByPath).
func poolDocuments(h *hangar) (docs, path *string) {
	return h.arn("ssm", "parameter/hangar/"+h.cfg.Stack+"/pools/*"), h.arn("ssm", "parameter/hangar/"+h.cfg.Stack+"/pools")
}

// startAndTerminate lets a role start the stack's claimed stopped instances and terminate the
// stack's failed ones, and no other instance.
func startAndTerminate(h *hangar) awsiam.PolicyStatement {
	return statement([]string{"ec2:StartInstances", "ec2:TerminateInstances"}, []*string{h.arn("ec2", "instance/*")},
		map[string]interface{}{"StringEquals": stackTag(h)})
}

// launches are the statements that let the workflows, refresh and the dispatcher launch
// instances: an instant EC2 Fleet (pkg/pool/fleet) from one of the stack's launch templates, and
// nothing else, so that no trusted repository can run a machine of its own with the instance
// profile (which receives from that instance's doorbell: every secret handed to it,
// docs/security.md).
//
//   - ec2:CreateFleet on the stack's templates only, on instances only from them
//     (ec2:LaunchTemplate) and tagged as the stack's; images only the pools' AMIs (a fleet's
//     overrides may name an image: no other is allowed); security groups only the pools'.
//   - ec2:RunInstances: an instant fleet launches through RunInstances, authorized as the caller
//     and made by EC2 Fleet on its behalf (CloudTrail shows it invoked by ec2fleet.amazonaws.com),
//     so it carries aws:ViaAWSService. A RunInstances the role sends itself does not, and is
//     refused: with a launch template it could replace the template's user data, for which IAM
//     has no condition key.
func launches(h *hangar, templates, images, groups []*string) []awsiam.PolicyStatement {
	viaFleet := map[string]interface{}{"Bool": map[string]interface{}{"aws:ViaAWSService": "true"}}
	both := func(resources []*string, cond map[string]interface{}) []awsiam.PolicyStatement {
		run := map[string]interface{}{}
		for k, v := range cond {
			run[k] = v
		}
		for k, v := range viaFleet {
			run[k] = v
		}
		return []awsiam.PolicyStatement{statement([]string{"ec2:CreateFleet"}, resources, cond), statement([]string{"ec2:RunInstances"}, resources, run)}
	}
	var out []awsiam.PolicyStatement
	out = append(out, both(templates, nil)...)
	out = append(out, both([]*string{h.arn("ec2", "instance/*")}, map[string]interface{}{
		"StringEquals": map[string]interface{}{"aws:RequestTag/" + fleet.TagStack: h.cfg.Stack},
		"ArnLike":      map[string]interface{}{"ec2:LaunchTemplate": templates},
	})...)
	out = append(out, both(images, nil)...)
	out = append(out, both(groups, nil)...)
	out = append(out, both([]*string{h.arn("ec2", "fleet/*"), h.arn("ec2", "volume/*"), h.arn("ec2", "network-interface/*"),
		h.arn("ec2", "subnet/*"), h.arn("ec2", "spot-instances-request/*")}, nil)...)
	return out
}

// awsArn is an ARN with an explicit account part ("" for public resources such as AMIs).
func awsArn(h *hangar, service, account, resource string) *string {
	return awscdk.Fn_Join(jsii.String(""), &[]*string{jsii.String("arn:"), h.stack.Partition(), jsii.String(":" + service + ":"),
		h.stack.Region(), jsii.String(":" + account + ":" + resource)})
}
