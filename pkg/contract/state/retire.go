package state

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/platform/awserr"
)

// MarkRetire marks an instance serving run to be retired rather than offered when the run gives
// it back (Home.Retire = why): how hangar drain reaches instances it may not end now. The write
// is conditional on the instance still serving run, and changes neither its state nor its
// version, so no transition in flight is disturbed; the mark outlives the move back to idle,
// where whoever gives it back reads it. It returns the item as written and true when the mark
// was made; otherwise the item as it is (nil when there is none) and false, so that the caller
// ends an instance that was given back meanwhile.
func (s *Store) MarkRetire(ctx context.Context, id, run, why string) (*Instance, bool, error) {
	if err := names.ValidateInstanceID(id); err != nil {
		return nil, false, err
	}
	if err := names.ValidateAssignmentKey(run); err != nil {
		return nil, false, fmt.Errorf("mark %s to retire: %w", id, err)
	}
	if why == "" {
		return nil, false, fmt.Errorf("mark %s to retire: no reason given", id)
	}
	expr, err := expression.NewBuilder().
		WithCondition(expression.Name(AttrRunID).Equal(expression.Value(run))).
		WithUpdate(expression.Set(expression.Name(AttrRetire), expression.Value(why))).Build()
	if err != nil {
		return nil, false, fmt.Errorf("mark %s to retire: %w", id, err)
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: s.key(id),
		ConditionExpression: expr.Condition(), UpdateExpression: expr.Update(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
		ReturnValues: types.ReturnValueAllNew, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if awserr.IsConditionFailed(err) {
		old := conditionItem(err)
		if len(old) == 0 {
			return nil, false, nil
		}
		cur, err := unmarshalItem(old)
		if err != nil {
			return nil, false, fmt.Errorf("mark %s to retire: no longer serving run %s, and its item is unreadable: %w", id, run, err)
		}
		return cur, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("mark %s to retire: %w", id, err)
	}
	in, err := unmarshalItem(out.Attributes)
	return in, err == nil, err
}
