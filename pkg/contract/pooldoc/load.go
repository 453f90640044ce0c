package pooldoc

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
)

// Load reads and validates the document of one pool of stack.
func Load(ctx context.Context, client awsapi.SSM, stack, pool string) (*Document, error) {
	name := ParameterName(stack, pool)
	out, err := client.GetParameter(ctx, &ssm.GetParameterInput{Name: &name})
	if err != nil {
		return nil, fmt.Errorf("read pool document %s: %w", name, err)
	}
	d, err := Parse([]byte(aws.ToString(out.Parameter.Value)))
	if err != nil {
		return nil, fmt.Errorf("pool document %s: %w", name, err)
	}
	if d.Name != pool {
		return nil, fmt.Errorf("pool document %s names pool %q", name, d.Name)
	}
	return d, nil
}

// LoadAll reads every pool document of stack. Documents that fail to parse are reported in the
// error and left out, so one broken pool does not stop the others.
func LoadAll(ctx context.Context, client awsapi.SSM, stack string) ([]*Document, error) {
	path := ParameterPath(stack)
	var (
		docs []*Document
		errs []error
	)
	p := ssm.NewGetParametersByPathPaginator(client, &ssm.GetParametersByPathInput{Path: &path})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list pool documents under %s: %w", path, err)
		}
		for _, prm := range page.Parameters {
			d, err := Parse([]byte(aws.ToString(prm.Value)))
			if err != nil {
				errs = append(errs, fmt.Errorf("pool document %s: %w", aws.ToString(prm.Name), err))
				continue
			}
			docs = append(docs, d)
		}
	}
	return docs, errors.Join(errs...)
}
