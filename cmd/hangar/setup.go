package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/spf13/cobra"

	"github.com/hangar-ci/hangar/internal/wire/awscfg"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/operator/doctor"
	"github.com/hangar-ci/hangar/pkg/operator/setup"
)

func newSetup(g *globals) *cobra.Command {
	var o setup.Options
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "register the stack's GitHub App through GitHub's manifest flow and store its credentials",
		Long: `setup registers the GitHub App of a deployed stack with label-routed jobs, so that no key is
copied by hand. It reads the stack's webhook URL and secrets from its CloudFormation outputs and
its GitHub server from its pool documents, then serves a page on a loopback address of this
machine and prints its address. Open it in a browser signed in to GitHub: it posts the App's
manifest (a private App, the workflow_job event, the permissions docs/labels.md lists, the
stack's webhook) to GitHub, which asks you to confirm and sends you back with a one-time code.
setup exchanges the code for the App's id, private key and webhook secret, proves the key by
acting as the App once, and writes them into the stack's App and webhook secrets. Then it
prints where to install the App: install it on the repositories the stack serves, and run
hangar doctor.

--org makes an organisation own the App (you must be one of its owners); without it your own
account does. Your AWS identity needs cloudformation:DescribeStacks and GetTemplate, ssm:GetParametersByPath on
/hangar/<stack>/ and secretsmanager:PutSecretValue on the two secrets.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := g.validate(); err != nil {
				return err
			}
			// What the operator gave is checked before AWS is asked anything.
			if err := setup.CheckInput(g.stack, o.Org, o.Name, o.Timeout); err != nil {
				return err
			}
			st, w, err := deployedJobsStack(ctx, g)
			if err != nil {
				return err
			}
			o.Stack, o.Secrets, o.HTTP = st, w, &http.Client{Timeout: time.Minute}
			o.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)).With("component", "setup")
			out := cmd.OutOrStdout()
			o.Ready = func(page string) {
				fmt.Fprintf(out, "Open this address in a browser signed in to %s:\n\n  %s\n\nWaiting for GitHub to send you back (Ctrl-C to give up).\n", st.GitHubURL, page)
			}
			res, err := setup.Run(ctx, o)
			if err != nil {
				return err
			}
			if g.output == outputJSON {
				return writeJSON(out, map[string]any{"stack": g.stack, "appId": res.App.ID, "slug": res.App.Slug, "owner": res.App.Owner, "installUrl": res.InstallURL})
			}
			fmt.Fprintf(out, "\nRegistered App %d (%s), owned by %s; its key and webhook secret are in the stack's secrets.\nInstall it on the repositories the stack serves:\n\n  %s\n\nthen run: hangar doctor --stack %s\n",
				res.App.ID, res.App.Slug, res.App.Owner, res.InstallURL, g.stack)
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Org, "org", "", "the organisation that will own the App (default: your own account)")
	cmd.Flags().StringVar(&o.Name, "name", "", "the App's name, unique on the GitHub server (default hangar-<stack>)")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", setup.DefaultTimeout, "how long to wait for GitHub to send the browser back")
	return cmd
}

// deployedJobsStack reads what setup needs of the deployed stack: its outputs and its pools'
// GitHub server; and a writer of its secrets.
func deployedJobsStack(ctx context.Context, g *globals) (setup.Stack, secretWriter, error) {
	if err := names.ValidateStack(g.stack); err != nil {
		return setup.Stack{}, secretWriter{}, fmt.Errorf("%w: --stack: %w", errBadInput, err)
	}
	cfg, err := awscfg.Load(ctx)
	if err != nil {
		return setup.Stack{}, secretWriter{}, err
	}
	outs, err := stackOutputs(ctx, cloudformation.NewFromConfig(cfg), g.stack)
	if err != nil {
		return setup.Stack{}, secretWriter{}, err
	}
	docs, err := pooldoc.LoadStack(ctx, ssm.NewFromConfig(cfg), g.stack)
	if err != nil {
		return setup.Stack{}, secretWriter{}, fmt.Errorf("read stack %s's pool documents: %w", g.stack, err)
	}
	// The App's credentials go to the GitHub server the stack was deployed for (its template),
	// never to one a pool document names alone: more identities may write those than deploy.
	tpl, err := deployedTemplate(ctx, cloudformation.NewFromConfig(cfg), g.stack)
	if err != nil {
		return setup.Stack{}, secretWriter{}, err
	}
	if err := doctor.SameGitHub(docs, doctor.TemplateGitHubAPI(tpl)); err != nil {
		return setup.Stack{}, secretWriter{}, fmt.Errorf("stack %s: %w (hangar doctor; deploy the stack again)", g.stack, err)
	}
	st := setup.Stack{Name: g.stack, GitHubURL: docs.Pools[0].GitHubURL, WebhookURL: outs["WebhookUrl"],
		AppSecretARN: outs["AppSecretArn"], WebhookSecretARN: outs["WebhookSecretArn"]}
	for _, d := range docs.Pools {
		if d.Jobs != nil && d.Jobs.OrgScope() {
			st.OrgScoped = true
		}
	}
	return st, secretWriter{client: secretsmanager.NewFromConfig(cfg)}, nil
}

// stackOutputs returns the CloudFormation stack's outputs by key.
func stackOutputs(ctx context.Context, cfn *cloudformation.Client, stack string) (map[string]string, error) {
	out, err := cfn.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(stack)})
	if err != nil {
		return nil, fmt.Errorf("read the CloudFormation stack %s's outputs (is it deployed in this account and region?): %w", stack, err)
	}
	if len(out.Stacks) == 0 {
		return nil, fmt.Errorf("%w: --stack %s: no such CloudFormation stack", errBadInput, stack)
	}
	outs := map[string]string{}
	for _, o := range out.Stacks[0].Outputs {
		outs[aws.ToString(o.OutputKey)] = aws.ToString(o.OutputValue)
	}
	return outs, nil
}

// deployedTemplate returns the CloudFormation stack's template as deployed.
func deployedTemplate(ctx context.Context, cfn *cloudformation.Client, stack string) (map[string]any, error) {
	out, err := cfn.GetTemplate(ctx, &cloudformation.GetTemplateInput{StackName: aws.String(stack)})
	if err != nil {
		return nil, fmt.Errorf("read the stack %s's template: %w", stack, err)
	}
	tpl, err := doctor.ParseTemplate([]byte(aws.ToString(out.TemplateBody)))
	if err != nil {
		return nil, fmt.Errorf("the stack %s's deployed template: %w", stack, err)
	}
	return tpl, nil
}

// secretWriter puts secrets' values with the operator's credentials.
type secretWriter struct{ client *secretsmanager.Client }

func (w secretWriter) Put(ctx context.Context, arn, value string) error {
	if w.client == nil {
		return errors.New("no Secrets Manager client")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err := w.client.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: &arn, SecretString: &value})
	if err != nil {
		return fmt.Errorf("put a new value in secret %s: %w", arn, err)
	}
	return nil
}
