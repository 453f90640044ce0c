package state

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ImageContractFailure starts an agent's failure when the instance's image lacks what Hangar
// needs (docs/configuration.md, "The image"): every instance of that launch spec fails the same
// way, so none more is launched (MarkBroken).
const ImageContractFailure = "the image lacks what Hangar needs"

// imageContractLine is how the agent's failure of the image contract ends its log.
const imageContractLine = "hangar-agent: " + ImageContractFailure

// FailsImageContract reports whether an agent's failure log ends with its failure of the image
// contract (a line the agent writes, not one a path or a script's output could carry).
func FailsImageContract(log string) bool {
	return strings.HasPrefix(LastLine(log), imageContractLine)
}

// brokenPrefix keys the items that mark a pool's broken spec: like cursors, they have no index
// attributes and their key is no instance's ARN.
const brokenPrefix = "broken/"

// Attributes of a broken-spec item.
const (
	attrBrokenSpec   = "brokenSpec"
	attrBrokenReason = "brokenReason"
	attrBrokenAt     = "brokenAt"
)

// BrokenSpec is a pool's launch spec whose instances fail the image contract, and why.
type BrokenSpec struct {
	Spec   string
	Reason string
	At     time.Time
}

// MarkBroken records that pool's spec b.Spec fails the image contract; a mark of the same spec
// is kept as it was (the first reason stays), one of another spec is replaced.
func (s *Store) MarkBroken(ctx context.Context, pool string, b BrokenSpec) error {
	cond := expression.AttributeNotExists(expression.Name(attrBrokenSpec)).
		Or(expression.Name(attrBrokenSpec).NotEqual(expression.Value(b.Spec)))
	upd := expression.Set(expression.Name(attrBrokenSpec), expression.Value(b.Spec)).
		Set(expression.Name(attrBrokenReason), expression.Value(b.Reason)).
		Set(expression.Name(attrBrokenAt), expression.Value(b.At.UnixMilli()))
	if _, err := s.updateIf(ctx, brokenPrefix+pool, cond, upd); err != nil {
		return fmt.Errorf("mark pool %s's spec %s broken: %w", pool, b.Spec, err)
	}
	return nil
}

// Broken returns pool's broken spec, nil when none was marked.
func (s *Store) Broken(ctx context.Context, pool string) (*BrokenSpec, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.table, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{AttrARN: &types.AttributeValueMemberS{Value: brokenPrefix + pool}},
	})
	if err != nil {
		return nil, fmt.Errorf("read pool %s's broken spec: %w", pool, err)
	}
	spec, ok := out.Item[attrBrokenSpec].(*types.AttributeValueMemberS)
	if !ok {
		return nil, nil
	}
	b := &BrokenSpec{Spec: spec.Value}
	if r, ok := out.Item[attrBrokenReason].(*types.AttributeValueMemberS); ok {
		b.Reason = r.Value
	}
	if n, ok := out.Item[attrBrokenAt].(*types.AttributeValueMemberN); ok {
		if ms, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
			b.At = time.UnixMilli(ms)
		}
	}
	return b, nil
}
