package pool_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// recordingEC2 passes calls to moto and records every TerminateInstances request's ids.
type recordingEC2 struct {
	*ec2.Client
	mu         sync.Mutex
	terminated [][]string
}

func (r *recordingEC2) TerminateInstances(ctx context.Context, in *ec2.TerminateInstancesInput, o ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error) {
	r.mu.Lock()
	r.terminated = append(r.terminated, slices.Clone(in.InstanceIds))
	r.mu.Unlock()
	return r.Client.TerminateInstances(ctx, in, o...)
}

func (r *recordingEC2) requested() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []string
	for _, ids := range r.terminated {
		all = append(all, ids...)
	}
	return all
}

type world struct {
	ctx   context.Context
	store *state.Store
	ec2   *recordingEC2
	stack string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	testbed.Require(t)
	ctx := testbed.Context(t, 2*time.Minute)
	db := testbed.DynamoDB(t)
	table := testbed.Name(t, "hangar-lifecycle")
	require.NoError(t, testbed.CreateTable(ctx, db, table))
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	store, err := state.NewStore(db, table, state.Account{Partition: "aws", Region: testbed.Region(), ID: testbed.Account})
	require.NoError(t, err)
	return &world{ctx: ctx, store: store, ec2: &recordingEC2{Client: ec2.NewFromConfig(testbed.AWSConfig(t))}, stack: table}
}

// launch starts n instances in moto, tagged as a launch of the stack is, and returns them.
func (w *world) launch(t *testing.T, n int) []fleet.Instance {
	t.Helper()
	out, err := w.ec2.RunInstances(w.ctx, &ec2.RunInstancesInput{ImageId: aws.String("ami-12c6146b"), MinCount: aws.Int32(int32(n)),
		MaxCount: aws.Int32(int32(n)), InstanceType: ec2types.InstanceTypeC7iLarge,
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: []ec2types.Tag{
			{Key: aws.String(fleet.TagStack), Value: aws.String(w.stack)}, {Key: aws.String(fleet.TagUnrecorded), Value: aws.String("true")}}}}})
	require.NoError(t, err)
	var insts []fleet.Instance
	for _, in := range out.Instances {
		insts = append(insts, fleet.Instance{ID: aws.ToString(in.InstanceId), Type: "c7i.large", AZ: "us-east-1a", UsageClass: state.UsageOnDemand, VCPU: 2, MemoryMiB: 4096})
	}
	return insts
}

func (w *world) ec2State(t *testing.T, id string) ec2types.InstanceStateName {
	t.Helper()
	out, err := w.ec2.DescribeInstances(w.ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	require.NoError(t, err)
	return out.Reservations[0].Instances[0].State.Name
}

func (w *world) tags(t *testing.T, id string) map[string]string {
	t.Helper()
	out, err := w.ec2.DescribeInstances(w.ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	require.NoError(t, err)
	tags := map[string]string{}
	for _, tg := range out.Reservations[0].Instances[0].Tags {
		tags[aws.ToString(tg.Key)] = aws.ToString(tg.Value)
	}
	return tags
}

var doc = &pooldoc.Document{Name: "linux", SpecHash: "spec-1", Timeouts: pooldoc.DefaultTimeouts}

// record writes items for n launched instances and moves them to idle.
func (w *world) idle(t *testing.T, n int) []state.Instance {
	t.Helper()
	rec := &pool.Recorder{Store: w.store, EC2: w.ec2}
	items, err := rec.Record(w.ctx, pool.Launch{Pool: doc, Instances: w.launch(t, n), At: time.Now(), Reason: "warm pool"})
	require.NoError(t, err)
	var out []state.Instance
	for _, it := range items {
		idle, err := w.store.Transition(w.ctx, state.Change{InstanceID: it.ID, Pool: doc.Name, From: state.Created, To: state.Idle,
			Version: it.Version, Threshold: time.Now().Add(time.Hour), Reason: "warm"})
		require.NoError(t, err)
		out = append(out, *idle)
	}
	return out
}

// TestRecordWritesItemsThenUntags: every launched instance gets an item in created, with its
// spec and run, and loses the unrecorded tag; a cancelled caller does not stop the writes.
func TestRecordWritesItemsThenUntags(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	launched := w.launch(t, 2)
	cancelled, cancel := context.WithCancel(w.ctx)
	cancel()
	rec := &pool.Recorder{Store: w.store, EC2: w.ec2}
	at := time.Now()
	items, err := rec.Record(cancelled, pool.Launch{Pool: doc, Instances: launched, At: at,
		Assign: func(context.Context, string) (*state.Assignment, error) {
			return &state.Assignment{RunID: "42", RunAttempt: 1, Repo: "octo/app"}, nil
		}, Reason: "created for run 42"})
	require.NoError(t, err)
	require.Len(t, items, 2)
	for _, l := range launched {
		it, err := w.store.Get(w.ctx, l.ID)
		require.NoError(t, err)
		require.Equal(t, state.Created, it.State)
		require.Equal(t, "42", it.RunID)
		require.Equal(t, "spec-1", it.SpecHash)
		require.Equal(t, "c7i.large", it.InstanceType)
		require.WithinDuration(t, at.Add(doc.Timeout(state.Created)), it.Threshold, time.Second)
		require.NotContains(t, w.tags(t, l.ID), fleet.TagUnrecorded, "the tag goes once the item exists")
	}
}

// TestRetireOnlyWhatItWon: of three instances, one is retired, one was claimed by another run
// after it was read (the lost write must never reach EC2), and one was terminated already.
func TestRetireOnlyWhatItWon(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	insts := w.idle(t, 3)
	won, taken, gone := insts[0], insts[1], insts[2]

	claimed, err := w.store.Transition(w.ctx, state.Change{InstanceID: taken.ID, Pool: doc.Name, From: state.Idle, To: state.Claimed,
		Version: taken.Version, Threshold: time.Now().Add(time.Hour), Assign: &state.Assignment{RunID: "77", RunAttempt: 1, Repo: "octo/other"}})
	require.NoError(t, err)
	_, err = w.store.Transition(w.ctx, state.Change{InstanceID: gone.ID, Pool: doc.Name, From: state.Idle, To: state.Terminated,
		Version: gone.Version, Reason: "expired"})
	require.NoError(t, err)

	r := &pool.Retirer{Store: w.store, EC2: w.ec2}
	res := r.Retire(w.ctx, []state.Instance{won, taken, gone}, pool.Because("test"))
	require.NoError(t, res.Err)

	require.Equal(t, []string{won.ID}, ids(res.Ended))
	require.Equal(t, []string{gone.ID}, ids(res.Already))
	require.Len(t, res.Lost, 1)
	require.Equal(t, state.Claimed, res.Lost[0].State, "Lost holds the instance as the winner left it")
	require.Equal(t, "77", res.Lost[0].RunID)
	require.NotContains(t, w.ec2.requested(), taken.ID, "a lost write never reaches TerminateInstances")
	require.Len(t, w.ec2.terminated, 1, "one request for all that were won")
	require.ElementsMatch(t, []string{won.ID, gone.ID}, w.ec2.requested(), "the terminated ones, this call's and the one already marked")

	it, err := w.store.Get(w.ctx, won.ID)
	require.NoError(t, err)
	require.Equal(t, state.Terminated, it.State)
	require.Equal(t, "test", it.StateReason)
	it, err = w.store.Get(w.ctx, taken.ID)
	require.NoError(t, err)
	require.Equal(t, state.Claimed, it.State, "the other run keeps its instance")
	require.Equal(t, claimed.Version, it.Version)
	require.Equal(t, ec2types.InstanceStateNameRunning, w.ec2State(t, taken.ID))
	require.Contains(t, []ec2types.InstanceStateName{ec2types.InstanceStateNameShuttingDown, ec2types.InstanceStateNameTerminated}, w.ec2State(t, won.ID))
}

// TestMarkTerminated: an event marks the item whatever live state it is in and asks nothing of
// EC2; an unknown or already terminated instance is left alone.
func TestMarkTerminated(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	in := w.idle(t, 1)[0]
	r := &pool.Retirer{Store: w.store, EC2: w.ec2}
	marked, err := r.MarkTerminated(w.ctx, in.ID, "spot interruption warning")
	require.NoError(t, err)
	require.NotNil(t, marked)
	it, err := w.store.Get(w.ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, state.Terminated, it.State)
	require.Empty(t, w.ec2.requested(), "EC2 is ending the machine already")

	again, err := r.MarkTerminated(w.ctx, in.ID, "again")
	require.NoError(t, err)
	require.Nil(t, again)
	unknown, err := r.MarkTerminated(w.ctx, "i-0123456789abcdef0", "x")
	require.NoError(t, err)
	require.Nil(t, unknown)
	_, err = r.MarkTerminated(w.ctx, "not-an-id", "x")
	require.ErrorContains(t, err, "malformed")
}

// fakeEC2 fails requests that name a gone or a refused instance, as EC2 fails a whole request
// for one bad id.
type fakeEC2 struct {
	gone, refused string
	calls         [][]string
}

func (f *fakeEC2) TerminateInstances(_ context.Context, in *ec2.TerminateInstancesInput, _ ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error) {
	f.calls = append(f.calls, slices.Clone(in.InstanceIds))
	switch {
	case slices.Contains(in.InstanceIds, f.gone):
		return nil, fmt.Errorf("op: %w", &smithy.GenericAPIError{Code: "InvalidInstanceID.NotFound", Message: f.gone})
	case slices.Contains(in.InstanceIds, f.refused):
		return nil, fmt.Errorf("op: %w", &smithy.GenericAPIError{Code: "UnauthorizedOperation", Message: f.refused})
	}
	return &ec2.TerminateInstancesOutput{}, nil
}

// TestTerminateBulkThenSingles: a batch that fails is retried instance by instance; an instance
// already gone is fine, a refused one is reported, and the others are terminated either way.
func TestTerminateBulkThenSingles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		ids       []string
		gone, bad string
		calls     int
		wantErr   string
	}{
		{"all fine: one request", []string{"i-1", "i-2", "i-3"}, "", "", 1, ""},
		{"one gone: singles, no error", []string{"i-1", "i-2", "i-3"}, "i-2", "", 4, ""},
		{"one refused: singles, reported", []string{"i-1", "i-2", "i-3"}, "", "i-3", 4, "UnauthorizedOperation"},
		{"single gone", []string{"i-2"}, "i-2", "", 1, ""},
		{"nothing", nil, "", "", 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeEC2{gone: tc.gone, refused: tc.bad}
			err := (&pool.Retirer{EC2: f}).Terminate(context.Background(), tc.ids)
			if tc.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tc.wantErr)
			}
			require.Len(t, f.calls, tc.calls)
			if tc.calls > 1 {
				for i, id := range tc.ids {
					require.Equal(t, []string{id}, f.calls[i+1], "each instance alone after the batch failed")
				}
			}
		})
	}
}

// TestTerminateBatches: more than 500 instances go in requests of at most 500.
func TestTerminateBatches(t *testing.T) {
	t.Parallel()
	ids := make([]string, 1001)
	for i := range ids {
		ids[i] = fmt.Sprintf("i-%08x", i)
	}
	f := &fakeEC2{}
	require.NoError(t, (&pool.Retirer{EC2: f}).Terminate(context.Background(), ids))
	require.Len(t, f.calls, 3)
	require.Len(t, f.calls[0], 500)
	require.Len(t, f.calls[2], 1)
}

// failingStore refuses every write, to show that a store failure is reported and nothing that
// was not marked reaches EC2.
type failingStore struct{ pool.Store }

func (failingStore) Transition(context.Context, state.Change) (*state.Instance, error) {
	return nil, errors.New("dynamodb is down")
}

func (failingStore) TransitionAll(_ context.Context, changes []state.Change, _ []state.Instance) []state.Written {
	out := make([]state.Written, len(changes))
	for i := range out {
		out[i].Err = errors.New("dynamodb is down")
	}
	return out
}

func TestRetireStoreDown(t *testing.T) {
	t.Parallel()
	f := &fakeEC2{}
	r := &pool.Retirer{Store: failingStore{}, EC2: f}
	res := r.Retire(context.Background(), []state.Instance{{ID: "i-0123456789abcdef0", Pool: "p", State: state.Idle, Version: 3}}, pool.Because("x"))
	require.ErrorContains(t, res.Err, "dynamodb is down")
	require.Empty(t, res.Ended)
	require.Empty(t, f.calls, "an instance whose item was not marked is not terminated")
}

func ids(insts []state.Instance) []string {
	out := make([]string, len(insts))
	for i, in := range insts {
		out[i] = in.ID
	}
	return out
}
