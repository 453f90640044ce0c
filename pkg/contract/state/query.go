package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/hangar-ci/hangar/pkg/contract/names"
)

// ByRun returns the instances that hold run (every state but terminated), through the byRun index.
func (s *Store) ByRun(ctx context.Context, run string) ([]Instance, error) {
	if err := names.ValidateAssignmentKey(run); err != nil {
		return nil, err
	}
	key := expression.Key(AttrRunID).Equal(expression.Value(run))
	out, err := s.query(ctx, IndexByRun, key)
	if err != nil {
		// Malformed items are left out (ErrBadItem), the others returned; any other error
		// returns nothing.
		return out, fmt.Errorf("instances of run %s: %w", run, err)
	}
	return out, nil
}

// InPoolState returns every instance of pool in state st, oldest deadline first, through the
// byPoolState index (one Query per shard, in parallel, every page). Items that are not
// well-formed instances are left out and named in an error matching ErrBadItem, returned with
// the others; any other error returns nothing.
func (s *Store) InPoolState(ctx context.Context, pool string, st State) ([]Instance, error) {
	return s.poolState(ctx, pool, st, time.Time{})
}

// Expired returns the instances of pool in state st whose threshold is before now, oldest first.
// Only expired items are read: the deadline is part of the index key condition.
func (s *Store) Expired(ctx context.Context, pool string, st State, now time.Time) ([]Instance, error) {
	if now.IsZero() {
		return nil, fmt.Errorf("expired %s instances of pool %s: now is not set", st, pool)
	}
	return s.poolState(ctx, pool, st, now)
}

func (s *Store) poolState(ctx context.Context, pool string, st State, before time.Time) ([]Instance, error) {
	if err := names.ValidatePool(pool); err != nil {
		return nil, err
	}
	if !st.Valid() || st == Terminated {
		return nil, fmt.Errorf("state %q: want a live state (created, idle, claimed, running, stopped)", st)
	}
	var all []Instance
	err := s.readShards(ctx, shardsOf(pool, st, shardRead{before: before}), func(_ shardRead, item map[string]types.AttributeValue) error {
		in, err := unmarshalItem(item)
		if err == nil {
			all = append(all, *in)
		}
		return err
	})
	if err != nil && !errors.Is(err, ErrBadItem) {
		return nil, fmt.Errorf("%s instances of pool %s: %w", st, pool, err)
	}
	slices.SortFunc(all, func(a, b Instance) int { return a.Threshold.Compare(b.Threshold) })
	if err != nil {
		return all, fmt.Errorf("%s instances of pool %s: %w", st, pool, err)
	}
	return all, nil
}

// query runs one index Query to its last page.
func (s *Store) query(ctx context.Context, index string, key expression.KeyConditionBuilder) ([]Instance, error) {
	expr, err := expression.NewBuilder().WithKeyCondition(key).WithProjection(readProjection).Build()
	if err != nil {
		return nil, fmt.Errorf("build key condition: %w", err)
	}
	in := &dynamodb.QueryInput{
		TableName:                 &s.table,
		IndexName:                 &index,
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
		ProjectionExpression:      expr.Projection(),
	}
	if s.PageLimit > 0 {
		in.Limit = &s.PageLimit
	}
	var (
		out []Instance
		bad []error
	)
	p := dynamodb.NewQueryPaginator(s.db, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", index, err)
		}
		items, err := unmarshalItems(page.Items)
		out, bad = append(out, items...), append(bad, err)
	}
	return out, errors.Join(bad...)
}
