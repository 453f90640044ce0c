package state

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/hangar-ci/hangar/pkg/contract/names"
)

// RunRecord is the history of one instance's service to one run attempt: written by the
// transition that ends it (the instance's move to idle or terminated while it held the run), in
// the same request (TransitionAll), so it can neither race another writer nor cost a request of
// its own. It lives in the instances' table under its own key, found through the byPoolState
// index by its pool and end time (KindRuns), until TTL removes it.
type RunRecord struct {
	Key            string    `dynamodbav:"instanceArn"`
	PoolStateShard string    `dynamodbav:"poolStateShard"`
	EndedAt        time.Time `dynamodbav:"threshold"`
	ExpiresAt      int64     `dynamodbav:"expiresAt"`
	Kind           string    `dynamodbav:"kind"`
	// Run is the run (or, label-routed, the job key) and its attempt; Repo its repository.
	Run        string `dynamodbav:"hRun"`
	RunAttempt int    `dynamodbav:"hAttempt,omitempty"`
	Repo       string `dynamodbav:"hRepo,omitempty"`
	InstanceID string `dynamodbav:"instanceId"`
	Pool       string `dynamodbav:"pool"`
	// Claimed says the instance came warm from the pool; otherwise it was created for the run.
	Claimed      bool      `dynamodbav:"claimed,omitempty"`
	AssignedAt   time.Time `dynamodbav:"assignedAt,omitempty"`
	RegisteredAt time.Time `dynamodbav:"registeredAt,omitempty"`
	// Outcome is the state the instance went to (idle: given back; terminated) and Reason why.
	Outcome string `dynamodbav:"outcome"`
	Reason  string `dynamodbav:"reason,omitempty"`
	// Job and TookJob are a label-routed job's: what GitHub calls it, and the job its runner ran.
	Job     *JobInfo `dynamodbav:"hJob,omitempty"`
	TookJob int64    `dynamodbav:"hTookJob,omitempty"`
	Spec
}

// KindRun marks a RunRecord item.
const KindRun = "run"

// runsState is the pseudo-state under which run records are kept in the byPoolState index.
const runsState State = "runs"

// Seconds is how long the run held the instance: from its assignment to the end.
func (r RunRecord) Seconds() float64 {
	if r.AssignedAt.IsZero() || r.EndedAt.Before(r.AssignedAt) {
		return 0
	}
	return r.EndedAt.Sub(r.AssignedAt).Seconds()
}

// Cost is the record's cost in US dollars (instance-seconds × the hourly price); ok is false
// when the instance's price is unknown.
func (r RunRecord) Cost() (usd float64, ok bool) {
	if r.PriceSource == "" {
		return 0, false
	}
	return r.Seconds() * r.Price / 3600, true
}

// Ends reports whether c ends a run on the instance before held: the instance goes to idle or is
// terminated while it held a run.
func (c Change) Ends(before Instance) bool {
	return before.RunID != "" && (c.To == Idle || c.To == Terminated)
}

// recordOf is the run record of c, which ends before's run, written at now.
func recordOf(c Change, before Instance, now time.Time, retention time.Duration) RunRecord {
	return RunRecord{
		Key:            runRecordKey(before.RunID, before.RunAttempt, c.InstanceID),
		PoolStateShard: PoolStateShard(c.Pool, runsState, c.InstanceID),
		EndedAt:        storedTime(now),
		ExpiresAt:      now.Add(retention).Unix(),
		Kind:           KindRun,
		Run:            before.RunID, RunAttempt: before.RunAttempt, Repo: before.Repo,
		InstanceID: c.InstanceID, Pool: c.Pool,
		Claimed: before.Claimed, AssignedAt: before.AssignedAt, RegisteredAt: before.RegisteredAt,
		Outcome: string(c.To), Reason: c.Reason, Job: before.Job, TookJob: before.TookJob, Spec: before.Spec,
	}
}

// runRecordKey is a run record's key: one per run attempt and instance, so that writing it again
// (a retried transaction) changes nothing.
func runRecordKey(run string, attempt int, instance string) string {
	return "run#" + run + "#" + strconv.Itoa(attempt) + "#" + instance
}

// put is the record's Put, for a transaction.
func (r RunRecord) put(table string) (*types.Put, error) {
	av, err := encoder.Encode(r)
	if err != nil {
		return nil, fmt.Errorf("encode the run record of %s: %w", r.InstanceID, err)
	}
	m, ok := av.(*types.AttributeValueMemberM)
	if !ok {
		return nil, fmt.Errorf("encode the run record of %s: got %T, want a map", r.InstanceID, av)
	}
	return &types.Put{TableName: &table, Item: m.Value}, nil
}

// RunRecords returns pool's run records that ended in [since, until), through the byPoolState
// index (one Query per shard, in parallel, every page; no Scan), oldest first.
func (s *Store) RunRecords(ctx context.Context, pool string, since, until time.Time) ([]RunRecord, error) {
	var out []RunRecord
	err := s.history(ctx, pool, runsState, since, until, &recordProjection, func(item map[string]types.AttributeValue) error {
		var r RunRecord
		if err := decoder.Decode(&types.AttributeValueMemberM{Value: item}, &r); err != nil {
			return fmt.Errorf("decode a run record: %w", err)
		}
		out = append(out, r)
		return nil
	})
	slices.SortFunc(out, func(a, b RunRecord) int { return a.EndedAt.Compare(b.EndedAt) })
	return out, err
}

// Ended returns pool's instances terminated in [since, until) whose items are still kept, oldest
// first, through the byPoolState index.
func (s *Store) Ended(ctx context.Context, pool string, since, until time.Time) ([]Instance, error) {
	var out []Instance
	err := s.history(ctx, pool, Terminated, since, until, nil, func(item map[string]types.AttributeValue) error {
		in, err := unmarshalItem(item)
		if err != nil {
			return err
		}
		out = append(out, *in)
		return nil
	})
	slices.SortFunc(out, func(a, b Instance) int { return a.Threshold.Compare(b.Threshold) })
	return out, err
}

// history reads every shard of pool's key for st, for the items whose threshold (their end) is
// in [since, until), reading what proj names (nil: an instance's attributes), and hands each
// item to add (one at a time).
func (s *Store) history(ctx context.Context, pool string, st State, since, until time.Time, proj *expression.ProjectionBuilder, add func(map[string]types.AttributeValue) error) error {
	if err := names.ValidatePool(pool); err != nil {
		return err
	}
	if !until.After(since) {
		return fmt.Errorf("history of pool %s: until %s is not after since %s", pool, until, since)
	}
	err := s.readShards(ctx, shardsOf(pool, st, shardRead{since: since, until: until, proj: proj}), func(_ shardRead, item map[string]types.AttributeValue) error {
		return add(item)
	})
	if err != nil {
		return fmt.Errorf("history of pool %s: %w", pool, err)
	}
	return nil
}

// recordProjection is every attribute of a run record.
var recordProjection = projection(reflect.TypeFor[RunRecord]())

// holdProjection is what a live instance's hold of a run needs (hangar runs and cost): the run,
// its attempt and repository; the instance, its pool, type, market and price; when the run got
// it and when its runner registered; where it stands and why.
var holdProjection = expression.NamesList(expression.Name(AttrARN), expression.Name("instanceId"), expression.Name("pool"),
	expression.Name("state"), expression.Name("stateReason"), expression.Name(AttrThreshold), expression.Name(AttrRunID),
	expression.Name("runAttempt"), expression.Name("repo"), expression.Name("claimed"), expression.Name("assignedAt"),
	expression.Name("registeredAt"), expression.Name("instanceType"), expression.Name("usageClass"), expression.Name("price"),
	expression.Name("priceSource"), expression.Name("job"), expression.Name("tookJob"))

// Holding returns pool's live instances that hold a run (created for it, claimed, running),
// each with only what says the hold (holdProjection): one Query per state and shard, in
// parallel, every page. Items that are not well-formed are left out and named in an error
// matching ErrBadItem, returned with the others; any other error returns nothing.
func (s *Store) Holding(ctx context.Context, pool string) ([]Instance, error) {
	if err := names.ValidatePool(pool); err != nil {
		return nil, err
	}
	var reads []shardRead
	for _, st := range []State{Created, Claimed, Running} {
		reads = append(reads, shardsOf(pool, st, shardRead{proj: &holdProjection})...)
	}
	var out []Instance
	err := s.readShards(ctx, reads, func(_ shardRead, item map[string]types.AttributeValue) error {
		if _, ok := item[AttrRunID]; !ok {
			return nil // a warm instance on its way to idle: no run
		}
		in, err := unmarshalItem(item)
		if err == nil {
			out = append(out, *in)
		}
		return err
	})
	if err != nil && !errors.Is(err, ErrBadItem) {
		return nil, fmt.Errorf("the instances of pool %s holding runs: %w", pool, err)
	}
	if err != nil {
		return out, fmt.Errorf("the instances of pool %s holding runs: %w", pool, err)
	}
	return out, nil
}
