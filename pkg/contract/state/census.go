package state

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/hangar-ci/hangar/pkg/contract/names"
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
	// IDs are the instances counted. An instance that moved between states while the census
	// read may be counted in both (or, rarely, in neither): a bound needs the set, and another
	// source besides (pool's cap: EC2's own view).
	IDs []string
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
	if err := names.ValidatePool(pool); err != nil {
		return Census{}, err
	}
	var reads []shardRead
	for _, st := range LiveStates {
		reads = append(reads, shardsOf(pool, st, shardRead{proj: &censusProjection})...)
	}
	out := Census{ByState: map[State]int{}, BySpec: map[string]int{}}
	for _, st := range LiveStates {
		out.ByState[st] = 0
	}
	err := s.readShards(ctx, reads, func(r shardRead, item map[string]types.AttributeValue) error {
		out.ByState[r.state]++
		if id, ok := item[attrInstanceID].(*types.AttributeValueMemberS); ok {
			out.IDs = append(out.IDs, id.Value)
		}
		hash := ""
		if h, ok := item[attrSpecHash].(*types.AttributeValueMemberS); ok {
			hash = h.Value
		}
		out.BySpec[hash]++
		if run, ok := item[AttrRunID].(*types.AttributeValueMemberS); ok && run.Value != "" && r.state == Created {
			out.CreatedForRun++
		}
		return nil
	})
	if err != nil {
		return Census{}, fmt.Errorf("count the instances of pool %s: %w", pool, err)
	}
	return out, nil
}

// censusProjection is what a census reads of an item: its id, its launch's spec hash and its run.
var censusProjection = expression.NamesList(expression.Name(attrInstanceID), expression.Name(attrSpecHash), expression.Name(AttrRunID))

// attrInstanceID is the attribute holding an item's instance id (Instance.ID).
const attrInstanceID = "instanceId"

// attrSpecHash is the attribute holding the spec hash of an instance's launch (Spec.SpecHash).
const attrSpecHash = "specHash"
