package state

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/platform/awserr"
)

// Waiter is a label-routed job waiting for room under its pool's (or the stack's) maxInstances.
// It is kept under the label door's own keys (EventPrefix: out of the workflow's and refresh's
// reach), found through the byPoolState index by its pool, oldest first, so that an instance
// coming back to the pool is given to the job that has waited longest.
type Waiter struct {
	Pool string
	// Key is the job's key (names.JobKey); Body its jobs-queue message, to place it again.
	Key  string
	Body string
	// Since is when the job began to wait.
	Since time.Time
	// Round is the try whose message may take the waiter (TakeWaiter): a try of an earlier
	// round, still on its way when the job was put back, takes nothing.
	Round int
	// Due is when its next try is due (zero: no try is known to be on its way).
	Due time.Time
}

// waitingState is the pseudo-state waiters are kept under in the byPoolState index (one shard:
// a pool has few of them, read a handful at a time).
const waitingState State = "waiting"

// waiterRetention bounds how long a waiter is kept: longer than GitHub keeps a job queued.
const waiterRetention = 25 * time.Hour

// WaiterPrefix keys the waiters: webhook/waiting/<pool>/<job key>, under EventPrefix.
const WaiterPrefix = EventPrefix + "waiting/"

func waiterKey(pool, key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrARN: &types.AttributeValueMemberS{Value: WaiterPrefix + pool + "/" + key}}
}

// Attributes of a waiter's item (beside the key, the index's and the TTL).
const (
	attrWaiterJob   = "wJob"
	attrWaiterPool  = "pool"
	attrWaiterRound = "wRound"
	attrWaiterDue   = "wDue"
)

// AddWaiter keeps w (replacing a waiter of the same pool and job).
func (s *Store) AddWaiter(ctx context.Context, w Waiter) error {
	if err := names.ValidatePool(w.Pool); err != nil {
		return err
	}
	if !names.IsJobKey(w.Key) {
		return fmt.Errorf("waiter %q: want a job's key", w.Key)
	}
	upd := expression.Set(expression.Name(AttrThreshold), expression.Value(millis(w.Since))).
		Set(expression.Name(AttrTTL), expression.Value(s.now().Add(waiterRetention).Unix())).
		Set(expression.Name(attrWaiterJob), expression.Value(w.Key)).
		Set(expression.Name(attrWaiterPool), expression.Value(w.Pool)).
		Set(expression.Name(attrWaiterRound), expression.Value(w.Round)).
		Set(expression.Name(attrEventBody), expression.Value(w.Body)).
		Set(expression.Name(AttrPoolStateShard), expression.Value(poolStateKey(w.Pool, waitingState, 0)))
	upd = setDue(upd, w.Due)
	expr, err := expression.NewBuilder().WithUpdate(upd).Build()
	if err != nil {
		return err
	}
	if _, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: waiterKey(w.Pool, w.Key),
		UpdateExpression: expr.Update(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()}); err != nil {
		return fmt.Errorf("keep job %s waiting for room in pool %s: %w", w.Key, w.Pool, err)
	}
	return nil
}

// NextRound moves a waiter on from round from to w.Round, keeping w.Body (its next try's
// message), unless it has been taken or moved on meanwhile: ok false then (one conditional write
// wins, as TakeWaiter's delete does, so that a waiter a wake took is never put back).
func (s *Store) NextRound(ctx context.Context, w Waiter, from int) (bool, error) {
	cond := expression.AttributeExists(expression.Name(AttrARN)).And(expression.Name(attrWaiterRound).Equal(expression.Value(from)))
	upd := expression.Set(expression.Name(attrWaiterRound), expression.Value(w.Round)).
		Set(expression.Name(attrEventBody), expression.Value(w.Body)).
		Set(expression.Name(AttrTTL), expression.Value(s.now().Add(waiterRetention).Unix()))
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(setDue(upd, w.Due)).Build()
	if err != nil {
		return false, err
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: waiterKey(w.Pool, w.Key),
		ConditionExpression: expr.Condition(), UpdateExpression: expr.Update(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()})
	switch {
	case err == nil:
		return true, nil
	case awserr.IsConditionFailed(err):
		return false, nil
	}
	return false, fmt.Errorf("keep job %s waiting in pool %s, round %d: %w", w.Key, w.Pool, w.Round, err)
}

// setDue adds a waiter's due time to upd, or removes it when zero.
func setDue(upd expression.UpdateBuilder, due time.Time) expression.UpdateBuilder {
	if due.IsZero() {
		return upd.Remove(expression.Name(attrWaiterDue))
	}
	return upd.Set(expression.Name(attrWaiterDue), expression.Value(millis(due)))
}

// Waiters returns up to limit of pool's waiters, those that have waited longest first.
func (s *Store) Waiters(ctx context.Context, pool string, limit int) ([]Waiter, error) {
	key := expression.Key(AttrPoolStateShard).Equal(expression.Value(poolStateKey(pool, waitingState, 0)))
	expr, err := expression.NewBuilder().WithKeyCondition(key).Build()
	if err != nil {
		return nil, err
	}
	res, err := s.db.Query(ctx, &dynamodb.QueryInput{TableName: &s.table, IndexName: aws.String(IndexByPoolState),
		KeyConditionExpression: expr.KeyCondition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
		Limit: aws.Int32(int32(limit))})
	if err != nil {
		return nil, fmt.Errorf("read the jobs waiting for room in pool %s: %w", pool, err)
	}
	out := make([]Waiter, 0, len(res.Items))
	for _, it := range res.Items {
		if w, ok := waiterOf(it); ok {
			out = append(out, w)
		}
	}
	return out, nil
}

// IsWaiting reports whether pool's job key is on its waiters (a consistent read).
func (s *Store) IsWaiting(ctx context.Context, pool, key string) (bool, error) {
	res, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: waiterKey(pool, key), ConsistentRead: aws.Bool(true),
		ProjectionExpression: aws.String("#k"), ExpressionAttributeNames: map[string]string{"#k": AttrARN}})
	if err != nil {
		return false, fmt.Errorf("read whether job %s waits in pool %s: %w", key, pool, err)
	}
	return len(res.Item) > 0, nil
}

// AnyRound takes a waiter whatever its round (TakeWaiter).
const AnyRound = -1

// TakeWaiter removes the waiter of pool's job key, and returns it: ok false when there was none
// (someone took it first: one conditional delete wins), or it is of another round than round
// (AnyRound: any).
func (s *Store) TakeWaiter(ctx context.Context, pool, key string, round int) (Waiter, bool, error) {
	cond := "attribute_exists(#k)"
	names := map[string]string{"#k": AttrARN}
	var values map[string]types.AttributeValue
	if round != AnyRound {
		cond += " AND #r = :r"
		names["#r"] = attrWaiterRound
		values = map[string]types.AttributeValue{":r": &types.AttributeValueMemberN{Value: fmt.Sprint(round)}}
	}
	res, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: waiterKey(pool, key),
		ConditionExpression: aws.String(cond), ExpressionAttributeNames: names, ExpressionAttributeValues: values,
		ReturnValues: types.ReturnValueAllOld})
	if awserr.IsConditionFailed(err) {
		return Waiter{}, false, nil
	}
	if err != nil {
		return Waiter{}, false, fmt.Errorf("take job %s off pool %s's waiters: %w", key, pool, err)
	}
	w, ok := waiterOf(res.Attributes)
	return w, ok, nil
}

func waiterOf(it map[string]types.AttributeValue) (Waiter, bool) {
	job, _ := it[attrWaiterJob].(*types.AttributeValueMemberS)
	pool, _ := it[attrWaiterPool].(*types.AttributeValueMemberS)
	body, _ := it[attrEventBody].(*types.AttributeValueMemberS)
	since, _ := it[AttrThreshold].(*types.AttributeValueMemberN)
	if job == nil || pool == nil || body == nil || since == nil {
		return Waiter{}, false
	}
	var ms int64
	if _, err := fmt.Sscan(since.Value, &ms); err != nil {
		return Waiter{}, false
	}
	round := 0
	if r, ok := it[attrWaiterRound].(*types.AttributeValueMemberN); ok {
		_, _ = fmt.Sscan(r.Value, &round)
	}
	w := Waiter{Pool: pool.Value, Key: job.Value, Body: body.Value, Since: time.UnixMilli(ms).UTC(), Round: round}
	if d, ok := it[attrWaiterDue].(*types.AttributeValueMemberN); ok {
		var due int64
		if _, err := fmt.Sscan(d.Value, &due); err == nil {
			w.Due = time.UnixMilli(due).UTC()
		}
	}
	return w, true
}
