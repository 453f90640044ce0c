package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
)

// Store reads and moves instance items. It is safe for concurrent use.
type Store struct {
	db      awsapi.DynamoDB
	table   string
	account Account

	// HistoryRetention is how long a terminated instance's item and a run's records are kept
	// (DefaultHistoryRetention when 0).
	HistoryRetention time.Duration

	// PageLimit caps the items per Query page (0: DynamoDB's 1 MB pages). Queries always follow
	// every page; the limit only changes how many requests that takes.
	PageLimit int32
	// Now is the clock for updatedAt and TTL; time.Now when nil.
	Now func() time.Time
}

func (s *Store) retention() time.Duration {
	if s.HistoryRetention > 0 {
		return s.HistoryRetention
	}
	return DefaultHistoryRetention
}

// NewStore returns a store for table, keying items by the ARNs of account.
func NewStore(db awsapi.DynamoDB, table string, account Account) (*Store, error) {
	if table == "" {
		return nil, errors.New("state store: table name is empty")
	}
	if err := account.Validate(); err != nil {
		return nil, fmt.Errorf("state store: %w", err)
	}
	return &Store{db: db, table: table, account: account}, nil
}

// Table returns the table name.
func (s *Store) Table() string { return s.table }

// Account returns the account the store keys items by.
func (s *Store) Account() Account { return s.account }

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Store) key(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrARN: &types.AttributeValueMemberS{Value: s.account.ARN(id)}}
}

// Get returns the item of instance id, read strongly consistently, or ErrNotFound. Like every
// control-plane read it reads the attributes Instance names, and no other (readProjection).
func (s *Store) Get(ctx context.Context, id string) (*Instance, error) {
	if err := names.ValidateInstanceID(id); err != nil {
		return nil, err
	}
	proj, err := expression.NewBuilder().WithProjection(readProjection).Build()
	if err != nil {
		return nil, fmt.Errorf("get instance %s: build projection: %w", id, err)
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.table, Key: s.key(id), ConsistentRead: aws.Bool(true),
		ProjectionExpression: proj.Projection(), ExpressionAttributeNames: proj.Names(),
	})
	if err != nil {
		return nil, fmt.Errorf("get instance %s: %w", id, err)
	}
	if len(out.Item) == 0 {
		return nil, fmt.Errorf("get instance %s: %w", id, ErrNotFound)
	}
	return unmarshalItem(out.Item)
}

// maxBatchGet is BatchGetItem's limit of keys per request.
const maxBatchGet = 100

// GetMany returns the items of ids that exist, keyed by instance id, read strongly consistently
// with as few BatchGetItem requests as the limit of 100 keys allows. Unprocessed keys are asked
// for again while ctx allows.
func (s *Store) GetMany(ctx context.Context, ids []string) (map[string]*Instance, error) {
	out := make(map[string]*Instance, len(ids))
	var bad []error
	seen := make(map[string]bool, len(ids))
	keys := make([]map[string]types.AttributeValue, 0, len(ids))
	for _, id := range ids {
		if err := names.ValidateInstanceID(id); err != nil {
			return nil, err
		}
		if !seen[id] {
			seen[id] = true
			keys = append(keys, s.key(id))
		}
	}
	proj, err := expression.NewBuilder().WithProjection(readProjection).Build()
	if err != nil {
		return nil, fmt.Errorf("get instances: build projection: %w", err)
	}
	for len(keys) > 0 {
		n := min(len(keys), maxBatchGet)
		batch := keys[:n]
		keys = keys[n:]
		backoff := unprocessedBackoff()
		for len(batch) > 0 {
			res, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
				s.table: {Keys: batch, ConsistentRead: aws.Bool(true), ProjectionExpression: proj.Projection(),
					ExpressionAttributeNames: proj.Names()},
			}})
			if err != nil {
				return nil, fmt.Errorf("get %d instances: %w", len(batch), err)
			}
			items, err := unmarshalItems(res.Responses[s.table])
			bad = append(bad, err)
			for i := range items {
				out[items[i].ID] = &items[i]
			}
			batch = res.UnprocessedKeys[s.table].Keys
			if len(batch) > 0 {
				if err := backoff.Sleep(ctx); err != nil {
					return nil, fmt.Errorf("get instances: %d keys left unprocessed: %w", len(batch), err)
				}
			}
		}
	}
	return out, errors.Join(bad...)
}

// maxTransact is TransactWriteItems' limit of actions per request.
const maxTransact = 100

// Create writes new items, each in state created with version 1, each only if no item exists for
// its instance (attribute_not_exists). Items are written in transactions of up to 100, so a
// request either writes all of its items or none. The given instances are updated in place with
// what was written.
func (s *Store) Create(ctx context.Context, insts []*Instance) error {
	now := s.now()
	items := make([]types.TransactWriteItem, 0, len(insts))
	cond := fmt.Sprintf("attribute_not_exists(%s)", AttrARN)
	for _, in := range insts {
		if err := PrepareNew(in, s.account, now); err != nil {
			return err
		}
		item, err := marshalItem(in)
		if err != nil {
			return err
		}
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			TableName: &s.table, Item: item, ConditionExpression: &cond,
		}})
	}
	for len(items) > 0 {
		n := min(len(items), maxTransact)
		if _, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items[:n]}); err != nil {
			return fmt.Errorf("create %d instance items: %w", n, err)
		}
		items = items[n:]
	}
	return nil
}

// PrepareNew checks a new item and fills in what Create writes with it: state created, version
// 1, the ARN of account, the index key, updatedAt (now) and launchedAt (now when unset), every
// time as a read returns it. It makes no request.
func PrepareNew(in *Instance, account Account, now time.Time) error {
	if err := names.ValidateInstanceID(in.ID); err != nil {
		return fmt.Errorf("create instance item: %w", err)
	}
	if err := names.ValidatePool(in.Pool); err != nil {
		return fmt.Errorf("create instance item %s: %w", in.ID, err)
	}
	if in.State == "" {
		in.State = Created
	}
	if in.State != Created {
		return fmt.Errorf("create instance item %s: state %q: new items start in created", in.ID, in.State)
	}
	if in.Threshold.IsZero() {
		return fmt.Errorf("create instance item %s: threshold is not set: every live state needs a deadline", in.ID)
	}
	if in.RunID != "" {
		if err := names.ValidateAssignmentKey(in.RunID); err != nil {
			return fmt.Errorf("create instance item %s: %w", in.ID, err)
		}
		if in.AssignedAt.IsZero() {
			in.AssignedAt = storedTime(now)
		}
		if err := names.ValidateRepository(in.Repo); err != nil {
			return fmt.Errorf("create instance item %s for run %s: %w", in.ID, in.RunID, err)
		}
		in.ServedRepos, in.ServedOwners = []string{in.Repo}, []string{names.Owner(in.Repo)}
	}
	if in.Report != (Report{}) {
		return fmt.Errorf("create instance item %s: agent attributes are the agent's to write", in.ID)
	}
	in.ARN = account.ARN(in.ID)
	in.Version = 1
	in.PoolStateShard = PoolStateShard(in.Pool, Created, in.ID)
	in.UpdatedAt = now
	if in.LaunchedAt.IsZero() {
		in.LaunchedAt = now
	}
	// Leave the caller holding exactly what a read returns: UTC, millisecond precision.
	for _, t := range []*time.Time{&in.Threshold, &in.UpdatedAt, &in.LaunchedAt} {
		*t = storedTime(*t)
	}
	return nil
}
