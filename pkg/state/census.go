package state

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Census is a pool's live instances, counted.
type Census struct {
	// ByState counts them by state.
	ByState map[State]int
	// CreatedForRun counts those created for a run (state created with a run): the rest of
	// ByState[Created] are warm instances on their way to idle.
	CreatedForRun int
	// BySpec counts them by the spec hash of the launch they came from ("" for none).
	BySpec map[string]int
}

// Live returns how many instances the census counted.
func (c Census) Live() int {
	n := 0
	for _, k := range c.ByState {
		n += k
	}
	return n
}

// Census counts pool's live instances through the byPoolState index: one Query per state and
// shard, in parallel, every page, each reading only the spec hash and run of its items (no Scan).
func (s *Store) Census(ctx context.Context, pool string) (Census, error) {
	if err := ValidatePool(pool); err != nil {
		return Census{}, err
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	out := Census{ByState: map[State]int{}, BySpec: map[string]int{}}
	for _, st := range LiveStates {
		out.ByState[st] = 0
		for shard := range Shards {
			wg.Go(func() {
				part, err := s.censusShard(ctx, st, poolStateKey(pool, st, shard))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				out.ByState[st] += part.ByState[st]
				out.CreatedForRun += part.CreatedForRun
				for h, k := range part.BySpec {
					out.BySpec[h] += k
				}
			})
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		return Census{}, fmt.Errorf("count the instances of pool %s: %w", pool, errors.Join(errs...))
	}
	return out, nil
}

// censusShard counts one shard of one pool and state.
func (s *Store) censusShard(ctx context.Context, st State, key string) (Census, error) {
	in := &dynamodb.QueryInput{
		TableName:                 &s.table,
		IndexName:                 aws.String(IndexByPoolState),
		KeyConditionExpression:    aws.String("#k = :k"),
		ExpressionAttributeNames:  map[string]string{"#k": AttrPoolStateShard, "#h": attrSpecHash, "#r": AttrRunID},
		ExpressionAttributeValues: map[string]types.AttributeValue{":k": &types.AttributeValueMemberS{Value: key}},
		ProjectionExpression:      aws.String("#h, #r"),
	}
	out := Census{ByState: map[State]int{}, BySpec: map[string]int{}}
	p := dynamodb.NewQueryPaginator(s.db, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return Census{}, fmt.Errorf("query %s: %w", key, err)
		}
		for _, item := range page.Items {
			out.ByState[st]++
			hash := ""
			if h, ok := item[attrSpecHash].(*types.AttributeValueMemberS); ok {
				hash = h.Value
			}
			out.BySpec[hash]++
			if r, ok := item[AttrRunID].(*types.AttributeValueMemberS); ok && r.Value != "" && st == Created {
				out.CreatedForRun++
			}
		}
	}
	return out, nil
}

// attrSpecHash is the attribute holding the spec hash of an instance's launch (Spec.SpecHash).
const attrSpecHash = "specHash"
