package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// shardRead is one Query of the byPoolState index: the items under one key (a pool's state or
// kind, and a shard), optionally bounded by threshold, reading the attributes proj names (nil:
// every attribute of an instance the control plane reads, readProjection).
type shardRead struct {
	state State
	key   string
	// before bounds the threshold from above (zero: no bound); since and until, when until is
	// set, keep it in [since, until).
	before, since, until time.Time
	proj                 *expression.ProjectionBuilder
}

// shardsOf is a read of each shard of pool's st.
func shardsOf(pool string, st State, r shardRead) []shardRead {
	out := make([]shardRead, Shards)
	for shard := range Shards {
		out[shard] = r
		out[shard].state, out[shard].key = st, poolStateKey(pool, st, shard)
	}
	return out
}

// readShards runs reads in parallel, each to its last page, and hands every item to each, one
// item at a time. It owns the fan-out of every read through the byPoolState index (poolState,
// Census, history, Holding). Failed queries are returned, joined (what was handed over is then
// partial); otherwise the items each refused are returned joined, matching ErrBadItem.
func (s *Store) readShards(ctx context.Context, reads []shardRead, each func(r shardRead, item map[string]types.AttributeValue) error) error {
	var (
		wg          sync.WaitGroup
		mu          sync.Mutex
		failed, bad []error
	)
	for _, r := range reads {
		wg.Go(func() {
			in, err := s.shardQuery(r)
			if err != nil {
				mu.Lock()
				failed = append(failed, err)
				mu.Unlock()
				return
			}
			p := dynamodb.NewQueryPaginator(s.db, in)
			for p.HasMorePages() {
				page, err := p.NextPage(ctx)
				mu.Lock()
				if err != nil {
					failed = append(failed, fmt.Errorf("query %s: %w", r.key, err))
					mu.Unlock()
					return
				}
				for _, item := range page.Items {
					if err := each(r, item); err != nil {
						bad = append(bad, fmt.Errorf("%w %s: %w", ErrBadItem, itemKey(item), err))
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		return errors.Join(failed...)
	}
	return errors.Join(bad...)
}

func (s *Store) shardQuery(r shardRead) (*dynamodb.QueryInput, error) {
	key := expression.Key(AttrPoolStateShard).Equal(expression.Value(r.key))
	switch {
	case !r.before.IsZero():
		key = key.And(expression.Key(AttrThreshold).LessThan(expression.Value(millis(r.before))))
	case !r.until.IsZero():
		key = key.And(expression.Key(AttrThreshold).Between(expression.Value(millis(r.since)), expression.Value(millis(r.until)-1)))
	}
	proj := readProjection
	if r.proj != nil {
		proj = *r.proj
	}
	expr, err := expression.NewBuilder().WithKeyCondition(key).WithProjection(proj).Build()
	if err != nil {
		return nil, fmt.Errorf("build the query of %s: %w", r.key, err)
	}
	in := &dynamodb.QueryInput{
		TableName:                 &s.table,
		IndexName:                 aws.String(IndexByPoolState),
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
		ProjectionExpression:      expr.Projection(),
	}
	if s.PageLimit > 0 {
		in.Limit = &s.PageLimit
	}
	return in, nil
}

// itemKey is an item's key, for naming it in an error ("?" when it has none).
func itemKey(item map[string]types.AttributeValue) string {
	if k, ok := item[AttrARN].(*types.AttributeValueMemberS); ok {
		return k.Value
	}
	return "?"
}
