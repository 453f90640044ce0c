package pool_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// offerQueue is a pool queue in the SQS emulator, and the Returner that offers on it.
type offerQueue struct {
	sqs *sqs.Client
	url string
}

func (w *world) returner(t *testing.T) (*pool.Returner, *offerQueue) {
	t.Helper()
	client := testbed.SQS(t)
	name := testbed.Name(t, "hangar-lifecycle-offers")
	out, err := client.CreateQueue(w.ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl}) })
	queue, err := offers.NewQueue(client, doc.Name, aws.ToString(out.QueueUrl), "")
	require.NoError(t, err)
	return &pool.Returner{Store: w.store, Offers: queue, Retirer: &pool.Retirer{Store: w.store, EC2: w.ec2}},
		&offerQueue{sqs: client, url: aws.ToString(out.QueueUrl)}
}

// received returns the offers on the queue; wait is how long to wait for the first one.
func (q *offerQueue) received(t *testing.T, ctx context.Context, wait int32) []offers.Message {
	t.Helper()
	out, err := q.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &q.url, MaxNumberOfMessages: 10, WaitTimeSeconds: wait})
	require.NoError(t, err)
	var msgs []offers.Message
	for _, m := range out.Messages {
		msg, err := offers.ParseMessage(aws.ToString(m.Body), doc.Name)
		require.NoError(t, err)
		msgs = append(msgs, msg)
	}
	return msgs
}

// claimed returns n idle instances claimed by run.
func (w *world) claimed(t *testing.T, n int, run string) []state.Instance {
	t.Helper()
	var out []state.Instance
	for _, in := range w.idle(t, n) {
		c, err := w.store.Transition(w.ctx, state.Change{InstanceID: in.ID, Pool: doc.Name, From: state.Idle, To: state.Claimed,
			Version: in.Version, Threshold: time.Now().Add(time.Hour), Assign: &state.Assignment{RunID: run, RunAttempt: 1, Repo: "octo/app"}})
		require.NoError(t, err)
		out = append(out, *c)
	}
	return out
}

func fixed(d *pooldoc.Document) func(context.Context, *state.Instance) (*pooldoc.Document, error) {
	return func(context.Context, *state.Instance) (*pooldoc.Document, error) { return d, nil }
}

// TestGiveBackOffers: an instance given back is idle with its pool's idle deadline, and its offer,
// at the version written, is on the pool's queue; nothing reaches EC2.
func TestGiveBackOffers(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	back, queue := w.returner(t)
	in := w.claimed(t, 1, "42")[0]
	at := time.Now()

	out, err := back.Idle(w.ctx, pool.Back{Instance: in, Idle: doc.Timeout(state.Idle), RunID: "42", At: at, Reason: "released by run 42"})
	require.NoError(t, err)
	res := back.OfferOrRetire(w.ctx, fixed(doc), []*state.Instance{out})
	require.NoError(t, res.Err)
	require.Empty(t, res.Retired)
	require.Equal(t, []string{in.ID}, []string{res.Offered[0].ID})

	it, err := w.store.Get(w.ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, state.Idle, it.State)
	require.Equal(t, "released by run 42", it.StateReason)
	require.WithinDuration(t, at.Add(doc.Timeout(state.Idle)), it.Threshold, time.Second, "the pool's idle deadline, from At")
	msgs := queue.received(t, w.ctx, 5)
	require.Len(t, msgs, 1)
	require.Equal(t, in.ID, msgs[0].InstanceID)
	require.Equal(t, it.Version, msgs[0].Version, "offered at the version written")
	require.Empty(t, w.ec2.requested())
}

// TestGiveBackReuseNever: an instance of a pool whose reuse is never, whose item was marked to
// retire while it served the run (a drain), or whose pool document cannot be read, is terminated
// (item and EC2), and not offered.
func TestGiveBackReuseNever(t *testing.T) {
	t.Parallel()
	never := *doc
	never.Reuse = state.ReuseNever
	tests := []struct {
		name   string
		pool   func(context.Context, *state.Instance) (*pooldoc.Document, error)
		mark   string // the reason the item is marked to retire with while it serves the run
		reason string
	}{
		{"reuse never", fixed(&never), "", "its pool's reuse is never: one run per instance"},
		{"marked while serving", fixed(doc), "its pool is drained", "its pool is drained"},
		{"marked, the item deciding alone", fixed(nil), "its pool is drained", "its pool is drained"},
		{"unreadable pool", func(context.Context, *state.Instance) (*pooldoc.Document, error) {
			return nil, errors.New("no such pool")
		},
			"", "its pool document is unreadable (no such pool)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			back, queue := w.returner(t)
			in := w.claimed(t, 1, "42")[0]
			if tc.mark != "" {
				marked, ok, err := w.store.MarkRetire(w.ctx, in.ID, "42", tc.mark)
				require.NoError(t, err)
				require.True(t, ok)
				require.Equal(t, tc.mark, marked.Retire)
				require.Equal(t, in.Version, marked.Version, "a mark moves no version: no transition in flight loses")
				// A give-back from the item as read before the mark loses, and is told of it.
				_, err = back.Idle(w.ctx, pool.Back{Instance: in, Idle: doc.Timeout(state.Idle), RunID: "42", Reason: "released by run 42"})
				var conflict *state.ConflictError
				require.ErrorAs(t, err, &conflict)
				require.Equal(t, tc.mark, conflict.Current.Retire)
				in = *marked
			}
			out, err := back.Idle(w.ctx, pool.Back{Instance: in, Idle: doc.Timeout(state.Idle), RunID: "42", Reason: "released by run 42"})
			require.NoError(t, err)
			require.Equal(t, tc.mark, out.Retire, "the mark outlives the move to idle")

			res := back.OfferOrRetire(w.ctx, tc.pool, []*state.Instance{out})
			require.NoError(t, res.Err)
			require.Empty(t, res.Offered)
			require.Len(t, res.Retired, 1)
			require.Equal(t, tc.reason, res.Retired[0].Reason)
			require.NoError(t, res.Retired[0].Err)
			require.Equal(t, []string{in.ID}, ids(res.Retired[0].Ended))

			it, err := w.store.Get(w.ctx, in.ID)
			require.NoError(t, err)
			require.Equal(t, state.Terminated, it.State)
			require.Equal(t, tc.reason, it.StateReason)
			require.Equal(t, []string{in.ID}, w.ec2.requested())
			require.Empty(t, queue.received(t, w.ctx, 0), "no offer")
		})
	}
}

// TestGiveBackLost: a conditional write that lost (the instance moved on since it was read) leaves
// the instance alone: the error holds it as it is now, and nothing is offered or terminated.
func TestGiveBackLost(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	back, queue := w.returner(t)
	in := w.claimed(t, 1, "42")[0]
	running, err := w.store.Transition(w.ctx, state.Change{InstanceID: in.ID, Pool: doc.Name, From: state.Claimed, To: state.Running,
		Version: in.Version, RunID: "42", Threshold: time.Now().Add(time.Hour)})
	require.NoError(t, err)

	out, err := back.Idle(w.ctx, pool.Back{Instance: in, Idle: doc.Timeout(state.Idle), RunID: "42", Reason: "released by run 42"})
	require.Nil(t, out)
	var conflict *state.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.NotNil(t, conflict.Current)
	require.Equal(t, state.Running, conflict.Current.State)

	it, err := w.store.Get(w.ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, state.Running, it.State)
	require.Equal(t, running.Version, it.Version)
	require.Empty(t, queue.received(t, w.ctx, 0))
	require.Empty(t, w.ec2.requested())
}
