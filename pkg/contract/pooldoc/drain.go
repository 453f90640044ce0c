package pooldoc

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
)

// SetDrained rewrites pool's document with drained set, or without it: every other field is kept
// as written (defaults are not filled in), and the result must parse before it is written. It
// returns the document as written. Two writers of one document at once (a deploy and a drain) are
// not ordered: the last one wins, and a deploy always leaves the pool undrained.
func SetDrained(ctx context.Context, client awsapi.SSM, stack, pool string, drained bool) (*Document, error) {
	name := ParameterName(stack, pool)
	out, err := client.GetParameter(ctx, &ssm.GetParameterInput{Name: &name})
	if err != nil {
		return nil, fmt.Errorf("read pool document %s: %w", name, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(aws.ToString(out.Parameter.Value)), &raw); err != nil {
		return nil, fmt.Errorf("pool document %s: %w", name, err)
	}
	delete(raw, "drained")
	if drained {
		raw["drained"] = json.RawMessage("true")
	}
	body, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("pool document %s: %w", name, err)
	}
	doc, err := Parse(body)
	if err != nil {
		return nil, fmt.Errorf("pool document %s with drained %t: %w", name, drained, err)
	}
	if _, err := client.PutParameter(ctx, &ssm.PutParameterInput{Name: &name, Value: aws.String(string(body)), Overwrite: aws.Bool(true)}); err != nil {
		return nil, fmt.Errorf("write pool document %s: %w", name, err)
	}
	return doc, nil
}
