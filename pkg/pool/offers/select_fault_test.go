package offers

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// fakeSQS serves a fixed list of messages once and records deletes and give-backs. It is for
// fault injection only; the real queue behaviour is tested against moto.
type fakeSQS struct {
	SQS
	mu       sync.Mutex
	pending  []types.Message
	deleted  []string
	returned []string
}

func (f *fakeSQS) ReceiveMessage(_ context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := min(int(in.MaxNumberOfMessages), len(f.pending))
	out := f.pending[:n]
	f.pending = f.pending[n:]
	return &sqs.ReceiveMessageOutput{Messages: out}, nil
}

// GetQueueAttributes counts what is left to receive (nothing is ever in flight here).
func (f *fakeSQS) GetQueueAttributes(_ context.Context, _ *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &sqs.GetQueueAttributesOutput{Attributes: map[string]string{
		string(types.QueueAttributeNameApproximateNumberOfMessages):           strconv.Itoa(len(f.pending)),
		string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible): "0",
	}}, nil
}

func (f *fakeSQS) DeleteMessageBatch(_ context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range in.Entries {
		f.deleted = append(f.deleted, aws.ToString(e.ReceiptHandle))
	}
	return &sqs.DeleteMessageBatchOutput{}, nil
}

func (f *fakeSQS) ChangeMessageVisibilityBatch(_ context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range in.Entries {
		f.returned = append(f.returned, aws.ToString(e.ReceiptHandle))
	}
	return &sqs.ChangeMessageVisibilityBatchOutput{}, nil
}

// claimFunc adapts a function to Claimer.
type claimFunc func(context.Context, state.Change) (*state.Instance, error)

func (f claimFunc) Transition(ctx context.Context, c state.Change) (*state.Instance, error) {
	return f(ctx, c)
}

// TransitionAll writes each change alone, as a cancelled transaction's items are.
func (f claimFunc) TransitionAll(ctx context.Context, changes []state.Change, _ []state.Instance) []state.Written {
	out := make([]state.Written, len(changes))
	for i, c := range changes {
		out[i].Item, out[i].Err = f(ctx, c)
	}
	return out
}

func offer(t *testing.T, handle string, m Message) types.Message {
	t.Helper()
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return types.Message{Body: aws.String(string(b)), ReceiptHandle: aws.String(handle), MessageId: aws.String(handle)}
}

// TestClaimRetriedAfterApplied: a claim whose retry reports a conflict against our own write is
// recognised as won; the same conflict against the claim of another provision of the same run
// (a duplicated offer taken by both) is not, so one instance is never credited to two.
func TestClaimRetriedAfterApplied(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, holder string
		won          bool
	}{{"our own write", "claim-a", true}, {"another provision of the run", "claim-b", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := goodMessage()
			m.Pool = "p"
			fake := &fakeSQS{pending: []types.Message{offer(t, "h1", m)}}
			q, err := NewQueue(fake, "p", "url", "")
			require.NoError(t, err)
			claimer := claimFunc(func(_ context.Context, c state.Change) (*state.Instance, error) {
				cur := &state.Instance{ID: c.InstanceID, Pool: "p", State: state.Claimed, Version: c.Version + 1}
				cur.RunID, cur.ClaimID = c.Assign.RunID, tc.holder
				return nil, &state.ConflictError{InstanceID: c.InstanceID, From: c.From, To: c.To, Version: c.Version, Current: cur}
			})
			res, err := (&Selector{Queue: q, Store: claimer}).Claim(context.Background(), Request{Count: 1,
				Assign: state.Assignment{RunID: "5", Repo: "octo/app", ClaimID: "claim-a"}, ClaimDeadline: time.Now().Add(time.Minute)})
			require.NoError(t, err)
			if tc.won {
				require.Len(t, res.Instances, 1)
			} else {
				require.Empty(t, res.Instances, "held by the other provision: not ours")
				require.Equal(t, 1, res.Stats.Lost)
			}
			require.Equal(t, []string{"h1"}, fake.deleted)
		})
	}
}

// TestClaimStoreFailure: a claim that fails for another reason than a lost race gives the
// message back, reports the error, and keeps what was won.
func TestClaimStoreFailure(t *testing.T) {
	t.Parallel()
	a, b := goodMessage(), goodMessage()
	a.Pool, b.Pool = "p", "p"
	b.InstanceID, b.InstanceARN = "i-0123456789abcdef1", "arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef1"
	fake := &fakeSQS{pending: []types.Message{offer(t, "ha", a), offer(t, "hb", b)}}
	q, err := NewQueue(fake, "p", "url", "")
	require.NoError(t, err)
	claimer := claimFunc(func(_ context.Context, c state.Change) (*state.Instance, error) {
		if c.InstanceID == b.InstanceID {
			return nil, errors.New("throttled after retries")
		}
		return &state.Instance{ID: c.InstanceID, State: state.Claimed, Version: c.Version + 1}, nil
	})
	res, err := (&Selector{Queue: q, Store: claimer}).Claim(context.Background(), Request{Count: 2,
		Assign: state.Assignment{RunID: "5", Repo: "octo/app"}, ClaimDeadline: time.Now().Add(time.Minute)})
	require.ErrorContains(t, err, "throttled after retries")
	require.Len(t, res.Instances, 1, "the won claim is kept")
	require.Equal(t, []string{"ha"}, fake.deleted)
	require.Equal(t, []string{"hb"}, fake.returned, "the failed claim's message is given back")
}

// TestClaimRefusedByItsConditionGivesTheOfferBack: a claim that loses although the item is just
// as offered (the reuse scope or a stale heartbeat refused it) leaves the offer for others.
func TestClaimRefusedByItsConditionGivesTheOfferBack(t *testing.T) {
	t.Parallel()
	m := goodMessage()
	m.Pool = "p"
	fake := &fakeSQS{pending: []types.Message{offer(t, "h1", m)}}
	q, err := NewQueue(fake, "p", "url", "")
	require.NoError(t, err)
	claimer := claimFunc(func(_ context.Context, c state.Change) (*state.Instance, error) {
		cur := &state.Instance{ID: c.InstanceID, Pool: "p", State: c.From, Version: c.Version}
		return nil, &state.ConflictError{InstanceID: c.InstanceID, From: c.From, To: c.To, Version: c.Version, Current: cur}
	})
	res, err := (&Selector{Queue: q, Store: claimer}).Claim(context.Background(), Request{Count: 1,
		Assign: state.Assignment{RunID: "5", Repo: "octo/app"}, ClaimDeadline: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	require.Empty(t, res.Instances)
	require.Zero(t, res.Stats.Lost)
	require.Empty(t, fake.deleted, "the offer is not deleted")
	require.Equal(t, []string{"h1"}, fake.returned, "it is given back")
}

// blockedDeletes holds every DeleteMessageBatch until release is closed.
type blockedDeletes struct {
	*fakeSQS
	release chan struct{}
}

func (b *blockedDeletes) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	<-b.release
	return b.fakeSQS.DeleteMessageBatch(ctx, in, o...)
}

// TestClaimAsyncReturnsBeforeTheTidy: the claimed instances come back while the used messages
// are still being deleted (the hand-overs need not wait for it), and tidy returns only once they
// are deleted.
func TestClaimAsyncReturnsBeforeTheTidy(t *testing.T) {
	t.Parallel()
	var msgs []types.Message
	for i := range 3 {
		m := goodMessage()
		m.Pool, m.InstanceID = "p", "i-0000000000000000"+strconv.Itoa(i)
		m.InstanceARN = "arn:aws:ec2:us-east-1:123456789012:instance/" + m.InstanceID
		msgs = append(msgs, offer(t, "h"+strconv.Itoa(i), m))
	}
	fake := &blockedDeletes{fakeSQS: &fakeSQS{pending: msgs}, release: make(chan struct{})}
	q, err := NewQueue(fake, "p", "url", "")
	require.NoError(t, err)
	claimer := claimFunc(func(_ context.Context, c state.Change) (*state.Instance, error) {
		it := &state.Instance{ID: c.InstanceID, Pool: "p", State: state.Claimed, Version: c.Version + 1}
		it.RunID = c.Assign.RunID
		return it, nil
	})
	res, tidy, err := (&Selector{Queue: q, Store: claimer}).ClaimAsync(context.Background(), Request{Count: 2,
		Assign: state.Assignment{RunID: "5", Repo: "octo/app", ClaimID: "claim-a"}, ClaimDeadline: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	require.Len(t, res.Instances, 2, "returned while the deletes are held")
	tidied := make(chan struct{})
	go func() { tidy(); close(tidied) }()
	select {
	case <-tidied:
		t.Fatal("tidy returned before the used messages were deleted")
	case <-time.After(50 * time.Millisecond):
	}
	close(fake.release)
	select {
	case <-tidied:
	case <-time.After(10 * time.Second):
		t.Fatal("tidy did not return once the deletes went through")
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	require.ElementsMatch(t, []string{"h0", "h1"}, fake.deleted, "the used offers deleted")
	require.Len(t, fake.pending, 1, "the third offer left for the next claimer")
}
