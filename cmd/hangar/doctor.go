package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/servicequotas"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/spf13/cobra"

	"github.com/hangar-ci/hangar/internal/wire/awscfg"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/operator/doctor"
)

// errFindings is doctor's failure: some check failed (exit 1), its findings already printed.
var errFindings = errors.New("some checks failed: fix what the FIX column says, then run hangar doctor again")

func newDoctor(g *globals) *cobra.Command {
	var templatePath string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "check a deployment for what would stop a job, each finding with its fix",
		Long: `doctor checks, for a deployed stack, everything that would stop a job and says how to fix each:
the account's Lambda concurrency and EC2 vCPU quotas against what the stack reserves and its
pools' caps need; GitHub's OIDC provider; each pool's image, subnets and security groups; each
pool's pinned runner against GitHub's releases (GitHub stops giving jobs to a runner 30 days after
a newer release); and, with label-routed jobs, the GitHub App (its key, its permissions and
event), its installations against the stack's trust set, its deliveries of the last day, the
webhook answering a signed ping, and the jobs dead-letter queue.

Before a deploy, --template cdk.out/<stack>.template.json (make synth writes it) checks the
synthesized stack against the account instead: the quotas, the OIDC provider it would create,
and its pools' images.

It exits 1 when a check fails (a warning does not), 2 on bad input. Your AWS identity needs read
access: lambda:GetAccountSettings, servicequotas:GetServiceQuota, iam:ListOpenIDConnectProviders,
ec2:Describe*, cloudformation:DescribeStacks and GetTemplate, ssm:GetParametersByPath on
/hangar/<stack>/, dynamodb:GetItem on the stack's table, sqs:GetQueueAttributes, and
secretsmanager:GetSecretValue on the App's secrets.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := g.validate(); err != nil {
				return err
			}
			if err := names.ValidateStack(g.stack); err != nil {
				return fmt.Errorf("%w: --stack: %w", errBadInput, err)
			}
			var body []byte
			if templatePath != "" {
				b, err := os.ReadFile(templatePath)
				if err != nil {
					return fmt.Errorf("%w: --template: %w (want cdk.out/<stack>.template.json, from make synth)", errBadInput, err)
				}
				body = b
			}
			d, err := doctorDeps(ctx, g, body)
			if err != nil {
				return err
			}
			findings := doctor.Run(ctx, d)
			if g.output == outputJSON {
				if err := writeJSON(cmd.OutOrStdout(), map[string]any{"stack": g.stack, "deployed": d.StackExists, "findings": findings}); err != nil {
					return err
				}
			} else if err := doctorTable(cmd, findings); err != nil {
				return err
			}
			if doctor.Failed(findings) {
				return errFindings
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&templatePath, "template", "", "before a deploy: the synthesized template (cdk.out/<stack>.template.json) to check against the account")
	return cmd
}

// doctorDeps wires the checks: the deployed stack's documents, template and outputs, or the
// synthesized template's (body) before a deploy.
func doctorDeps(ctx context.Context, g *globals, body []byte) (doctor.Deps, error) {
	cfg, err := awscfg.Load(ctx)
	if err != nil {
		return doctor.Deps{}, err
	}
	if cfg.Region == "" {
		return doctor.Deps{}, fmt.Errorf("%w: no AWS region: set AWS_REGION (or a profile's region) to the stack's region", errBadInput)
	}
	d := doctor.Deps{EC2: ec2.NewFromConfig(cfg), Quotas: servicequotas.NewFromConfig(cfg), Lambda: lambda.NewFromConfig(cfg),
		IAM: iam.NewFromConfig(cfg), SQS: sqs.NewFromConfig(cfg), Secrets: secretsmanager.NewFromConfig(cfg),
		HTTP: &http.Client{Timeout: 30 * time.Second}}
	if body != nil {
		if d.Template, err = doctor.ParseTemplate(body); err != nil {
			return doctor.Deps{}, fmt.Errorf("%w: --template: %w", errBadInput, err)
		}
		if d.Stack, err = doctor.PoolsFromTemplate(g.stack, d.Template); err != nil {
			return doctor.Deps{}, fmt.Errorf("%w: --template: %w", errBadInput, err)
		}
		return d, nil
	}
	cfn := cloudformation.NewFromConfig(cfg)
	if d.Outputs, err = stackOutputs(ctx, cfn, g.stack); err != nil {
		return doctor.Deps{}, err
	}
	if d.Template, err = deployedTemplate(ctx, cfn, g.stack); err != nil {
		return doctor.Deps{}, err
	}
	if d.Stack, err = pooldoc.LoadStack(ctx, ssm.NewFromConfig(cfg), g.stack); err != nil {
		return doctor.Deps{}, fmt.Errorf("read stack %s's pool documents: %w", g.stack, err)
	}
	d.StackExists = true
	d.GitHubAPI = doctor.TemplateGitHubAPI(d.Template)
	store, err := state.NewStore(dynamodb.NewFromConfig(cfg), d.Stack.Table, d.Stack.Account)
	if err != nil {
		return doctor.Deps{}, err
	}
	d.Broken = store.Broken
	return d, nil
}

// doctorTable prints the findings, failures first.
func doctorTable(cmd *cobra.Command, fs []doctor.Finding) error {
	rows := make([][]string, 0, len(fs))
	for _, want := range []doctor.Status{doctor.Fail, doctor.Warn, doctor.OK} {
		for _, f := range fs {
			if f.Status == want {
				rows = append(rows, []string{f.Check, strings.ToUpper(string(f.Status)), f.Detail, f.Fix})
			}
		}
	}
	return table(cmd.OutOrStdout(), []string{"CHECK", "STATUS", "DETAIL", "FIX"}, rows)
}
