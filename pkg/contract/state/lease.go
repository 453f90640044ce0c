package state

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/hangar-ci/hangar/pkg/platform/awserr"
)

// leasePrefix keys lease items. They have no index attributes, so no query ever returns them, and
// no instance role can touch them (their key is no instance's ARN).
const leasePrefix = "lease/"

// Lease takes the named lease for ttl if no one holds it (or the holder's has run out, or runs
// further than ttl from now, which no holder asking for ttl could have written: a forged lease
// blocks no one for longer than ttl), with one conditional write. It reports whether holder now
// holds it. Refresh takes one per pool before launching, so that two refreshes at once do not
// both fill the same deficit; launches under a cap take the cap's (pool.Pool).
func (s *Store) Lease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	if name == "" || holder == "" || ttl <= 0 {
		return false, fmt.Errorf("lease %q for %q, %s: want a name, a holder and a positive duration", name, holder, ttl)
	}
	now := s.now()
	cond := expression.AttributeNotExists(expression.Name(AttrARN)).
		Or(expression.Name("leaseUntil").LessThan(expression.Value(now.UnixMilli()))).
		Or(expression.Name("leaseUntil").GreaterThan(expression.Value(now.Add(ttl).UnixMilli())))
	upd := expression.Set(expression.Name("leaseUntil"), expression.Value(now.Add(ttl).UnixMilli())).
		Set(expression.Name("holder"), expression.Value(holder)).
		Set(expression.Name(AttrTTL), expression.Value(now.Add(ttl+time.Hour).Unix()))
	ok, err := s.updateIf(ctx, leasePrefix+name, cond, upd)
	if err != nil {
		return false, fmt.Errorf("take lease %s: %w", name, err)
	}
	return ok, nil
}

// NewLeaseHolder returns a fresh name for one holder of leases (a refresh, a launch under a cap).
func NewLeaseHolder() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// ReleaseLease gives the named lease up if holder holds it.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	_, err := s.updateIf(ctx, leasePrefix+name, expression.Name("holder").Equal(expression.Value(holder)),
		expression.Set(expression.Name("leaseUntil"), expression.Value(0)))
	if err != nil {
		return fmt.Errorf("release lease %s: %w", name, err)
	}
	return nil
}

// updateIf makes upd to the control item key (a lease's or a cursor's: no instance's) if cond
// holds, with one conditional write, and reports whether it did: a condition that does not hold
// is an answer, not an error.
func (s *Store) updateIf(ctx context.Context, key string, cond expression.ConditionBuilder, upd expression.UpdateBuilder) (bool, error) {
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
	if err != nil {
		return false, err
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: map[string]types.AttributeValue{AttrARN: &types.AttributeValueMemberS{Value: key}},
		ConditionExpression: expr.Condition(), UpdateExpression: expr.Update(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	})
	switch {
	case err == nil:
		return true, nil
	case awserr.IsConditionFailed(err):
		return false, nil
	}
	return false, err
}
