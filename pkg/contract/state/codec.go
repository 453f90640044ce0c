package state

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Times are stored as Unix milliseconds (N), so thresholds sort and compare in index key
// conditions; a zero time is left out of the item.
var (
	encoder = attributevalue.NewEncoder(func(o *attributevalue.EncoderOptions) {
		o.EncodeTime = func(t time.Time) (types.AttributeValue, error) {
			return &types.AttributeValueMemberN{Value: strconv.FormatInt(t.UnixMilli(), 10)}, nil
		}
		o.OmitEmptyTime = true
	})
	decoder = attributevalue.NewDecoder(func(o *attributevalue.DecoderOptions) {
		o.DecodeTime.N = func(v string) (time.Time, error) {
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("time %q is not Unix milliseconds: %w", v, err)
			}
			return storedTime(time.UnixMilli(ms)), nil
		}
	})
)

func marshalItem(in *Instance) (map[string]types.AttributeValue, error) {
	av, err := encoder.Encode(in)
	if err != nil {
		return nil, fmt.Errorf("encode instance %s: %w", in.ID, err)
	}
	m, ok := av.(*types.AttributeValueMemberM)
	if !ok {
		return nil, fmt.Errorf("encode instance %s: got %T, want a map", in.ID, av)
	}
	return m.Value, nil
}

func unmarshalItem(item map[string]types.AttributeValue) (*Instance, error) {
	var in Instance
	if err := decoder.Decode(&types.AttributeValueMemberM{Value: item}, &in); err != nil {
		return nil, fmt.Errorf("decode item: %w", err)
	}
	if in.ARN == "" || in.ID == "" || !in.State.Valid() {
		return nil, fmt.Errorf("decode item: not a Hangar instance item (instanceArn %q, instanceId %q, state %q)", in.ARN, in.ID, in.State)
	}
	return &in, nil
}

// unmarshalItems decodes the items of a query or batch read. One item that is not a Hangar
// instance (written by hand, or by something else) never hides the others: it is left out, and
// the error (matching ErrBadItem) names its key and what is wrong with it.
func unmarshalItems(items []map[string]types.AttributeValue) ([]Instance, error) {
	out := make([]Instance, 0, len(items))
	var bad []error
	for _, it := range items {
		in, err := unmarshalItem(it)
		if err != nil {
			key := "?"
			if k, ok := it[AttrARN].(*types.AttributeValueMemberS); ok {
				key = k.Value
			}
			bad = append(bad, fmt.Errorf("%w %s: %w", ErrBadItem, key, err))
			continue
		}
		out = append(out, *in)
	}
	return out, errors.Join(bad...)
}

func millis(t time.Time) int64 { return t.UnixMilli() }

// storedTime returns t as a read returns it: UTC, whole milliseconds; zero stays zero.
func storedTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMilli(t.UnixMilli()).UTC()
}
