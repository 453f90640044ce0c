package doctor

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/servicequotas"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// lambdaUnreserved is what Lambda keeps of an account's concurrency for functions without a
// reservation: a reservation that would leave less is refused.
const lambdaUnreserved = 100

// lambdaQuota checks that the account's Lambda concurrency holds the template's reservations and
// the 100 executions Lambda keeps unreserved.
func lambdaQuota(ctx context.Context, d Deps) Finding {
	const check = "quota.lambda"
	reserved := 0
	for _, fn := range resources(d.Template, "AWS::Lambda::Function") {
		if n, ok := fn["ReservedConcurrentExecutions"].(float64); ok {
			reserved += int(n)
		}
	}
	out, err := d.Lambda.GetAccountSettings(ctx, &lambda.GetAccountSettingsInput{})
	if err != nil || out.AccountLimit == nil {
		return warned(check, fmt.Sprintf("could not read the account's Lambda concurrency: %v", err), "allow lambda:GetAccountSettings to the identity running hangar doctor")
	}
	limit := int(out.AccountLimit.ConcurrentExecutions)
	need := reserved + lambdaUnreserved
	if reserved == 0 {
		if len(resources(d.Template, "AWS::Lambda::Url")) > 0 {
			return warned(check, fmt.Sprintf("the stack reserves no concurrency (lambda.reserveConcurrency: false): a flood of requests at its public webhook may take the account's %d executions from every function, the dispatcher's included", limit),
				"ask for the stack's reservations plus 100 (Service Quotas → AWS Lambda → Concurrent executions, L-B99A9384; docs/deploy.md), then set lambda.reserveConcurrency back to true")
		}
		return ok(check, fmt.Sprintf("the stack reserves no concurrency; the account's quota is %d", limit))
	}
	if d.StackExists {
		// Deployed, the stack's reservations are already taken from what is left unreserved.
		if limit >= need {
			return ok(check, fmt.Sprintf("the account's concurrency %d holds the stack's %d reserved and %d unreserved", limit, reserved, lambdaUnreserved))
		}
	} else if limit-otherReserved(out)-reserved >= lambdaUnreserved {
		return ok(check, fmt.Sprintf("the account's concurrency %d holds the template's %d reserved, what other functions reserve, and %d unreserved", limit, reserved, lambdaUnreserved))
	}
	return failed(check, fmt.Sprintf("the account's Lambda concurrency is %d (%d unreserved now); the stack reserves %d, and Lambda keeps %d unreserved: the deploy fails", limit,
		aws.ToInt32(out.AccountLimit.UnreservedConcurrentExecutions), reserved, lambdaUnreserved),
		fmt.Sprintf("ask for at least %d (Service Quotas → AWS Lambda → Concurrent executions, L-B99A9384), or set lambda.reserveConcurrency: false until it is granted (docs/configuration.md)", need))
}

// otherReserved is what the account's functions reserve already.
func otherReserved(out *lambda.GetAccountSettingsOutput) int {
	return int(out.AccountLimit.ConcurrentExecutions - aws.ToInt32(out.AccountLimit.UnreservedConcurrentExecutions))
}

// vcpuQuota is one of EC2's vCPU quotas, by instance family and market.
type vcpuQuota struct {
	code, name string
}

// quotaOf returns the vCPU quota that instance type t counts against in a market (spot or
// on-demand), or false for a family whose quota the check does not know.
func quotaOf(t string, spot bool) (vcpuQuota, bool) {
	family := strings.ToLower(t)
	if i := strings.IndexAny(family, "0123456789-"); i > 0 {
		family = family[:i]
	}
	type pair struct{ od, spot vcpuQuota }
	var p pair
	switch {
	case family == "inf":
		p = pair{vcpuQuota{"L-1945791B", "Running On-Demand Inf instances"}, vcpuQuota{"L-B5D1601B", "All Inf Spot Instance Requests"}}
	case family == "vt" || strings.HasPrefix(family, "g"):
		p = pair{vcpuQuota{"L-DB2E81BA", "Running On-Demand G and VT instances"}, vcpuQuota{"L-3819A6DF", "All G and VT Spot Instance Requests"}}
	case strings.HasPrefix(family, "p"):
		p = pair{vcpuQuota{"L-417A185B", "Running On-Demand P instances"}, vcpuQuota{"L-7212CCBC", "All P Spot Instance Requests"}}
	case strings.HasPrefix(family, "x"):
		p = pair{vcpuQuota{"L-7295265B", "Running On-Demand X instances"}, vcpuQuota{"L-E3A00192", "All X Spot Instance Requests"}}
	case strings.HasPrefix(family, "f"):
		p = pair{vcpuQuota{"L-74FC7D96", "Running On-Demand F instances"}, vcpuQuota{"L-88CF9481", "All F Spot Instance Requests"}}
	case family != "" && strings.ContainsRune("acdhimrtz", rune(family[0])) && family != "trn" && family != "dl" && family != "hpc" && family != "mac":
		p = pair{vcpuQuota{"L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"},
			vcpuQuota{"L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"}}
	default:
		return vcpuQuota{}, false
	}
	if spot {
		return p.spot, true
	}
	return p.od, true
}

// vcpuQuotas checks that each vCPU quota the pools count against holds their caps: a pool at its
// maxInstances, each instance of its largest type.
func vcpuQuotas(ctx context.Context, d Deps) []Finding {
	const check = "quota.vcpu"
	var out []Finding
	need := map[vcpuQuota]int{}
	var users = map[vcpuQuota][]string{}
	for _, doc := range d.Stack.Pools {
		limit := doc.MaxInstances
		if limit == 0 && doc.StackCap != nil {
			limit = doc.StackCap.MaxInstances
		}
		if limit == 0 {
			out = append(out, warned(check, fmt.Sprintf("pool %s has no maxInstances: a burst launches until the account's vCPU quota refuses", doc.Name),
				"set the pool's maxInstances (docs/configuration.md)"))
			continue
		}
		if len(doc.InstanceTypes) == 0 {
			out = append(out, warned(check, fmt.Sprintf("pool %s chooses its types by size: its vCPU quota is not checked", doc.Name), ""))
			continue
		}
		types, err := d.EC2.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: toTypes(doc.InstanceTypes)})
		if err != nil {
			out = append(out, failed(check, fmt.Sprintf("pool %s's instance types %v: %v", doc.Name, doc.InstanceTypes, err),
				"name instance types EC2 offers in the stack's region"))
			continue
		}
		most := 0
		for _, t := range types.InstanceTypes {
			if t.VCpuInfo != nil {
				most = max(most, int(aws.ToInt32(t.VCpuInfo.DefaultVCpus)))
			}
		}
		markets := []bool{doc.Market == pooldoc.MarketSpot}
		if doc.Market == pooldoc.MarketSpotFallback {
			markets = []bool{true, false} // a fallback may land wholly on either
		}
		for _, spot := range markets {
			q, known := quotaOf(doc.InstanceTypes[0], spot)
			if !known {
				out = append(out, warned(check, fmt.Sprintf("pool %s: the vCPU quota of %s is not checked", doc.Name, doc.InstanceTypes[0]), ""))
				continue
			}
			need[q] += limit * most
			users[q] = append(users[q], fmt.Sprintf("%s %d × %d vCPUs", doc.Name, limit, most))
		}
	}
	codes := make([]vcpuQuota, 0, len(need))
	for q := range need {
		codes = append(codes, q)
	}
	sort.Slice(codes, func(i, j int) bool { return codes[i].code < codes[j].code })
	for _, q := range codes {
		got, err := d.Quotas.GetServiceQuota(ctx, &servicequotas.GetServiceQuotaInput{ServiceCode: aws.String("ec2"), QuotaCode: aws.String(q.code)})
		if err != nil || got.Quota == nil || got.Quota.Value == nil {
			out = append(out, warned(check, fmt.Sprintf("could not read %s (%s): %v", q.name, q.code, err), "allow servicequotas:GetServiceQuota to the identity running hangar doctor"))
			continue
		}
		have := int(*got.Quota.Value)
		detail := fmt.Sprintf("%s (%s): %d vCPUs; the pools at their caps need %d (%s)", q.name, q.code, have, need[q], strings.Join(users[q], ", "))
		if have < need[q] {
			out = append(out, failed(check, detail, fmt.Sprintf("ask for %d (Service Quotas → Amazon EC2 → %s), or lower the pools' maxInstances", need[q], q.code)))
			continue
		}
		out = append(out, ok(check, detail))
	}
	return out
}

func toTypes(ts []string) []ec2types.InstanceType {
	out := make([]ec2types.InstanceType, len(ts))
	for i, t := range ts {
		out[i] = ec2types.InstanceType(t)
	}
	return out
}

// oidcProvider checks GitHub's OIDC provider: before a deploy, that the template does not
// create one the account has (CloudFormation would fail); deployed, that the one the workflow
// role trusts exists.
func oidcProvider(ctx context.Context, d Deps) Finding {
	const check = "oidc"
	const host = "token.actions.githubusercontent.com" // the issuer the workflow role trusts
	list, err := d.IAM.ListOpenIDConnectProviders(ctx, &iam.ListOpenIDConnectProvidersInput{})
	if err != nil {
		return warned(check, fmt.Sprintf("could not list the account's OIDC providers: %v", err), "allow iam:ListOpenIDConnectProviders to the identity running hangar doctor")
	}
	found := ""
	for _, p := range list.OpenIDConnectProviderList {
		if strings.HasSuffix(aws.ToString(p.Arn), "oidc-provider/"+host) {
			found = aws.ToString(p.Arn)
		}
	}
	creates := len(resources(d.Template, "AWS::IAM::OIDCProvider")) > 0
	switch {
	case !d.StackExists && creates && found != "":
		return failed(check, "the account already has GitHub's OIDC provider "+found+", and the stack would create another: the deploy fails",
			"set github.oidcProviderArn: "+found+" in the config (docs/deploy.md)")
	case !d.StackExists:
		return ok(check, "the template's OIDC provider does not collide with the account's")
	case found == "":
		return failed(check, "no OIDC provider for "+host+": the workflow role cannot be assumed, and the steps fail",
			"deploy the stack again without github.oidcProviderArn, or create the provider (docs/deploy.md)")
	}
	return ok(check, "GitHub's OIDC provider: "+found)
}

// poolResources checks each pool's image, subnets and security groups exist.
func poolResources(ctx context.Context, d Deps) []Finding {
	var out []Finding
	for _, doc := range d.Stack.Pools {
		image, groups := launchSettings(ctx, d, doc)
		if image != "" {
			out = append(out, imageFinding(ctx, d, doc.Name, image))
		}
		var subnets []string
		for _, s := range doc.Subnets {
			subnets = append(subnets, s.ID)
		}
		if len(subnets) > 0 {
			out = append(out, exists("pool.subnets", doc.Name, "subnets", subnets, func() (int, error) {
				o, err := d.EC2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: subnets})
				if err != nil {
					return 0, err
				}
				return len(o.Subnets), nil
			}))
		}
		if len(groups) > 0 {
			out = append(out, exists("pool.securityGroups", doc.Name, "security groups", groups, func() (int, error) {
				o, err := d.EC2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: groups})
				if err != nil {
					return 0, err
				}
				return len(o.SecurityGroups), nil
			}))
		}
	}
	return out
}

// launchSettings returns the image and security groups a pool's instances launch with: from its
// launch template, deployed; from the template's launch template, before a deploy.
func launchSettings(ctx context.Context, d Deps, doc *pooldoc.Document) (string, []string) {
	if !d.StackExists || doc.LaunchTemplate.ID == "" {
		return templateImage(d.Template, doc.Name), nil
	}
	out, err := d.EC2.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateId: aws.String(doc.LaunchTemplate.ID),
		Versions: []string{cmp.Or(doc.LaunchTemplate.Version, "$Latest")}})
	if err != nil || len(out.LaunchTemplateVersions) == 0 || out.LaunchTemplateVersions[0].LaunchTemplateData == nil {
		return "", nil
	}
	data := out.LaunchTemplateVersions[0].LaunchTemplateData
	groups := slices.Clone(data.SecurityGroupIds)
	for _, ni := range data.NetworkInterfaces {
		groups = append(groups, ni.Groups...)
	}
	return aws.ToString(data.ImageId), groups
}

// templateImage returns the AMI a synthesized template's launch template for pool names: a
// literal id, or the default of the parameter it refers to (an SSM parameter's name).
func templateImage(tpl map[string]any, pool string) string {
	for _, lt := range resources(tpl, "AWS::EC2::LaunchTemplate") {
		name, _ := lt["LaunchTemplateName"].(string)
		data, _ := lt["LaunchTemplateData"].(map[string]any)
		if data == nil || (name != "" && !strings.HasSuffix(name, "-"+pool)) {
			continue
		}
		switch v := data["ImageId"].(type) {
		case string:
			return v
		case map[string]any:
			ref, _ := v["Ref"].(string)
			params, _ := tpl["Parameters"].(map[string]any)
			p, _ := params[ref].(map[string]any)
			def, _ := p["Default"].(string)
			return def
		}
	}
	return ""
}

// imageFinding checks an image exists: an AMI id, or an SSM parameter naming one (looked up by
// EC2 as resolve:ssm does).
func imageFinding(ctx context.Context, d Deps, pool, image string) Finding {
	const check = "pool.image"
	in := &ec2.DescribeImagesInput{ImageIds: []string{image}}
	if !strings.HasPrefix(image, "ami-") {
		in.ImageIds = []string{"resolve:ssm:" + image}
	}
	out, err := d.EC2.DescribeImages(ctx, in)
	if err != nil || len(out.Images) == 0 {
		why := "no such image"
		if err != nil {
			why = err.Error()
		}
		return failed(check, fmt.Sprintf("pool %s's image %s: %s: every launch fails", pool, image, why),
			"set the pool's image to an AMI of this region your account may launch (docs/configuration.md, image)")
	}
	if st := out.Images[0].State; st != "" && st != ec2types.ImageStateAvailable {
		return failed(check, fmt.Sprintf("pool %s's image %s is %s", pool, image, st), "use an available image")
	}
	return ok(check, fmt.Sprintf("pool %s's image %s (%s)", pool, aws.ToString(out.Images[0].ImageId), aws.ToString(out.Images[0].Name)))
}

// exists checks that every one of ids was found (count returns how many were).
func exists(check, pool, what string, ids []string, count func() (int, error)) Finding {
	n, err := count()
	if err != nil || n < len(ids) {
		why := fmt.Sprintf("%d of %d found", n, len(ids))
		if err != nil {
			why = err.Error()
		}
		return failed(check, fmt.Sprintf("pool %s's %s %v: %s", pool, what, ids, why), "name "+what+" of the stack's VPC that exist (docs/configuration.md)")
	}
	return ok(check, fmt.Sprintf("pool %s's %s %v", pool, what, ids))
}
