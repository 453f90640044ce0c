package offers_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// Most tests here run the real queue, selector and directory on the in-memory fakes
// (internal/testkit/fake): the stateful store with the state machine's conditional writes, and
// an SQS whose receives hide messages for their visibility timeout. Only the race of concurrent
// claimers runs against the emulators (race_test.go).

var idSeq atomic.Uint64

func newID() string { return fmt.Sprintf("i-%017x", idSeq.Add(1)+uint64(time.Now().UnixNano())<<8) }

var spotC7 = state.Spec{InstanceType: "c7i.large", UsageClass: state.UsageSpot, AZ: "us-east-1a", VCPU: 2, MemoryMiB: 4096}

func request(run string, n int) offers.Request {
	return offers.Request{Count: n, Assign: state.Assignment{RunID: run, Repo: "octo/app"}, ClaimDeadline: time.Now().Add(5 * time.Minute)}
}

// world is one test's pool on the fakes: its queue and dead-letter queue on the fake SQS, its
// items in the fake store. No agent writes to the items.
type world struct {
	*fake.World
	t     *testing.T
	ctx   context.Context
	pool  string
	queue *offers.Queue
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := fake.NewWorld(t, nil)
	w.Agent.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return &world{World: w, t: t, ctx: ctx, pool: w.Doc.Name, queue: w.Queue(t)}
}

// idleIn creates an idle instance of pool with spec, as a warm launch does (created, then idle),
// and, when offer is set, offers it on the world's queue.
func (w *world) idleIn(pool string, spec state.Spec, offer bool) *state.Instance {
	w.t.Helper()
	in := &state.Instance{ID: newID(), Pool: pool, Threshold: time.Now().Add(10 * time.Minute), Spec: spec,
		Home: state.Home{IdleSecs: 1800, Queue: fake.QueueURLBase + fake.Stack + "-" + pool}}
	require.NoError(w.t, w.Store.Create(w.ctx, []*state.Instance{in}))
	out, err := w.Store.Transition(w.ctx, state.Change{InstanceID: in.ID, Pool: pool, From: state.Created, To: state.Idle,
		Version: 1, Threshold: time.Now().Add(30 * time.Minute)})
	require.NoError(w.t, err)
	if offer {
		require.NoError(w.t, w.queue.Publish(w.ctx, out))
	}
	return out
}

// idle creates an idle instance of the pool with spec and offers it.
func (w *world) idle(spec state.Spec) *state.Instance { return w.idleIn(w.pool, spec, true) }

// move writes c to the store (a claim, a stop: someone else's doing) and returns the item.
func (w *world) move(c state.Change) *state.Instance {
	w.t.Helper()
	if c.Pool == "" {
		c.Pool = w.pool
	}
	if c.Threshold.IsZero() {
		c.Threshold = time.Now().Add(time.Hour)
	}
	out, err := w.Store.Transition(w.ctx, c)
	require.NoError(w.t, err)
	return out
}

// claimFor claims in for run directly, as another provision holding its offer elsewhere would.
func (w *world) claimFor(in *state.Instance, run string) *state.Instance {
	return w.move(state.Change{InstanceID: in.ID, From: in.State, To: state.Claimed, Version: in.Version,
		Assign: &state.Assignment{RunID: run, Repo: "octo/app"}})
}

// stop moves in to stopped, as refresh does for the stopped part of a warm pool.
func (w *world) stop(in *state.Instance) *state.Instance {
	return w.move(state.Change{InstanceID: in.ID, From: in.State, To: state.Stopped, Version: in.Version})
}

func (w *world) selector() *offers.Selector {
	return &offers.Selector{Queue: w.queue, Store: w.Store}
}

// offered counts the instances the pool's queue offers, by message, visible or not.
func (w *world) offered() map[string]int {
	w.t.Helper()
	out := map[string]int{}
	for _, id := range w.Offered(w.t) {
		out[id]++
	}
	return out
}

// counts returns SQS's counts of visible and hidden messages of the queue at url.
func (w *world) counts(url string) (visible, hidden int) {
	w.t.Helper()
	out, err := w.SQS.GetQueueAttributes(w.ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	require.NoError(w.t, err)
	visible, err = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
	require.NoError(w.t, err)
	hidden, err = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	require.NoError(w.t, err)
	return visible, hidden
}

// receive receives up to n visible messages of the pool's queue, hiding them for visibility, as a
// claimer does.
func (w *world) receive(n int32, visibility int32) []sqstypes.Message {
	w.t.Helper()
	out, err := w.SQS.ReceiveMessage(w.ctx, &sqs.ReceiveMessageInput{QueueUrl: &w.Doc.QueueURL, MaxNumberOfMessages: n,
		VisibilityTimeout: visibility})
	require.NoError(w.t, err)
	return out.Messages
}

// send sends a raw body to the pool's queue.
func (w *world) send(body string) {
	w.t.Helper()
	_, err := w.SQS.SendMessage(w.ctx, &sqs.SendMessageInput{QueueUrl: &w.Doc.QueueURL, MessageBody: aws.String(body)})
	require.NoError(w.t, err)
}
