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

	"github.com/hangar-ci/hangar/pkg/platform/awserr"
)

// EventPrefix keys the records of the webhook events a stack accepted: webhook/<job id>/<action>.
// Like leases they carry no index attribute (no query returns them) and no instance's ARN (no
// instance role can touch them).
const EventPrefix = "webhook/"

// EventRetention is how long an accepted webhook event is remembered: longer than GitHub keeps a
// job queued (24 hours) and than anyone redelivers a webhook by hand.
const EventRetention = 3 * 24 * time.Hour

// attrEventBody holds what the webhook accepted (the job as routed, JSON).
const attrEventBody = "body"

func eventKey(job int64, action string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrARN: &types.AttributeValueMemberS{Value: EventPrefix + strconv.FormatInt(job, 10) + "/" + action}}
}

// RecordEvent records, with one conditional write, that the webhook accepted action for job,
// keeping body. It reports false when the event was recorded before: a second delivery of the
// same job and action, whatever its delivery id, is a no-op.
func (s *Store) RecordEvent(ctx context.Context, job int64, action, body string) (bool, error) {
	now := s.now()
	cond := expression.AttributeNotExists(expression.Name(AttrARN))
	upd := expression.Set(expression.Name(attrEventBody), expression.Value(body)).
		Set(expression.Name("updatedAt"), expression.Value(millis(now))).
		Set(expression.Name(AttrTTL), expression.Value(now.Add(EventRetention).Unix()))
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
	if err != nil {
		return false, err
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: eventKey(job, action),
		ConditionExpression: expr.Condition(), UpdateExpression: expr.Update(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	})
	switch {
	case err == nil:
		return true, nil
	case awserr.IsConditionFailed(err):
		return false, nil
	}
	return false, fmt.Errorf("record the %s event of job %d: %w", action, job, err)
}

// ForgetEvent removes an event's record: it could not be passed on, and a redelivery must be
// taken.
func (s *Store) ForgetEvent(ctx context.Context, job int64, action string) error {
	if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: eventKey(job, action)}); err != nil {
		return fmt.Errorf("forget the %s event of job %d: %w", action, job, err)
	}
	return nil
}

// Events returns, for those of jobs whose action was recorded, the body kept with it, read
// strongly consistently with one BatchGetItem per 100 jobs.
func (s *Store) Events(ctx context.Context, action string, jobs []int64) (map[int64]string, error) {
	out := make(map[int64]string, len(jobs))
	for len(jobs) > 0 {
		n := min(len(jobs), maxBatchGet)
		keys := make([]map[string]types.AttributeValue, 0, n)
		seen := map[int64]bool{}
		for _, j := range jobs[:n] {
			if !seen[j] {
				seen[j] = true
				keys = append(keys, eventKey(j, action))
			}
		}
		jobs = jobs[n:]
		backoff := unprocessedBackoff()
		for len(keys) > 0 {
			res, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
				s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}})
			if err != nil {
				return nil, fmt.Errorf("read the %s events of jobs: %w", action, err)
			}
			for _, it := range res.Responses[s.table] {
				key, _ := it[AttrARN].(*types.AttributeValueMemberS)
				body, _ := it[attrEventBody].(*types.AttributeValueMemberS)
				if key == nil {
					continue
				}
				var job int64
				var act string
				if _, err := fmt.Sscanf(key.Value, EventPrefix+"%d/%s", &job, &act); err == nil && body != nil {
					out[job] = body.Value
				}
			}
			keys = res.UnprocessedKeys[s.table].Keys
			if len(keys) > 0 {
				if err := backoff.Sleep(ctx); err != nil {
					return nil, fmt.Errorf("read the %s events of jobs: %d keys unprocessed: %w", action, len(keys), err)
				}
			}
		}
	}
	return out, nil
}
