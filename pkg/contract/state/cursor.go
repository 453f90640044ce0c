package state

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// cursorPrefix keys cursor items: like leases, they have no index attributes (no query returns
// them) and their key is no instance's ARN (no instance role reaches them).
const cursorPrefix = "cursor/"

// attrCursorAt is a cursor's position, in Unix milliseconds.
const attrCursorAt = "cursorAt"

// Cursor reads the named cursor's position (zero when it was never advanced), consistently.
func (s *Store) Cursor(ctx context.Context, name string) (time.Time, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.table, ConsistentRead: aws.Bool(true),
		Key:                  map[string]types.AttributeValue{AttrARN: &types.AttributeValueMemberS{Value: cursorPrefix + name}},
		ProjectionExpression: aws.String(attrCursorAt),
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("read cursor %s: %w", name, err)
	}
	n, ok := out.Item[attrCursorAt].(*types.AttributeValueMemberN)
	if !ok {
		return time.Time{}, nil
	}
	ms, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("read cursor %s: position %q: %w", name, n.Value, err)
	}
	return time.UnixMilli(ms), nil
}

// AdvanceCursor moves the named cursor from from (zero: never advanced) to to, with one
// conditional write, and reports whether it did: false when someone else moved it first, so
// that what lies between is handled once. It never moves a cursor back.
func (s *Store) AdvanceCursor(ctx context.Context, name string, from, to time.Time) (bool, error) {
	if !to.After(from) {
		return false, fmt.Errorf("advance cursor %s from %s to %s: want a later position", name, from, to)
	}
	cond := expression.AttributeNotExists(expression.Name(AttrARN))
	if !from.IsZero() {
		cond = expression.Name(attrCursorAt).Equal(expression.Value(from.UnixMilli()))
	}
	ok, err := s.updateIf(ctx, cursorPrefix+name, cond, expression.Set(expression.Name(attrCursorAt), expression.Value(to.UnixMilli())))
	if err != nil {
		return false, fmt.Errorf("advance cursor %s: %w", name, err)
	}
	return ok, nil
}
