package doorbell_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
)

func TestNames(t *testing.T) {
	for _, tc := range []struct{ stack, id string }{
		{"hangar", "i-0123456789abcdef0"},
		{strings.Repeat("s", 63), "i-0123456789abcdef0"},
		{"prod", "i-01234567"},
	} {
		name := doorbell.Name(tc.stack, tc.id)
		require.LessOrEqual(t, len(name), 80, "SQS names are at most 80 characters: %s", name)
		require.True(t, strings.HasPrefix(name, doorbell.Prefix(tc.stack)))
		require.True(t, strings.HasSuffix(name, "_bell_"+tc.id))
	}
	require.NotEqual(t, doorbell.Prefix("a"), doorbell.Prefix("ab"), "stacks' doorbells never share a prefix")
	long := strings.Repeat("s", 63)
	require.NotEqual(t, doorbell.Prefix(long), doorbell.Prefix(long[:62]+"t"), "stacks cut to fit keep apart by a hash")
	require.False(t, strings.HasPrefix("hangar-bell-x", doorbell.Prefix("hangar")), "a pool named bell-x is no doorbell")
	var off *doorbell.Bells
	require.False(t, off.On())
	require.Empty(t, off.URL("i-1"))
	require.NoError(t, off.Ring(context.Background(), "x"), "no doorbells: ringing is a no-op")
}

func TestNewRefusesBadInput(t *testing.T) {
	_, err := doorbell.New(nil, "s", "https://sqs/1/q")
	require.ErrorContains(t, err, "want an SQS client")
	_, err = doorbell.New(&sqs.Client{}, "s", "no-slash")
	require.ErrorContains(t, err, `queue "no-slash"`)
}

// client returns an SQS client for the emulator, or skips.
func client(t *testing.T) *sqs.Client {
	t.Helper()
	if testing.Short() || os.Getenv("AWS_ENDPOINT_URL") == "" {
		t.Skip("needs the emulators (make testbed-up)")
	}
	cfg, err := config.LoadDefaultConfig(context.Background())
	require.NoError(t, err)
	return sqs.NewFromConfig(cfg)
}

// stackBeside makes a stack name of its own for a test (prefix and the time) and its pool queue
// in the emulator, deleted when the test ends, and returns the name and the queue's URL.
func stackBeside(ctx context.Context, t *testing.T, c *sqs.Client, prefix string) (string, string) {
	t.Helper()
	stack := prefix + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	anchor, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(stack + "-pool")})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: anchor.QueueUrl}) })
	return stack, *anchor.QueueUrl
}

func TestRingIsHeardDeleteEndsIt(t *testing.T) {
	c := client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stack, anchor := stackBeside(ctx, t, c, "bell-test-")
	b, err := doorbell.New(c, stack, anchor)
	require.NoError(t, err)

	id, arn := "i-0aaaaaaaaaaaaaaa1", "arn:aws:ec2:us-east-1:123456789012:instance/i-0aaaaaaaaaaaaaaa1"
	require.NoError(t, b.Create(ctx, map[string]string{id: arn, "i-0aaaaaaaaaaaaaaa2": "arn-2"}))
	require.NoError(t, b.Create(ctx, map[string]string{id: arn}), "creating again is a no-op")
	tags, err := c.ListQueueTags(ctx, &sqs.ListQueueTagsInput{QueueUrl: aws.String(b.URL(id))})
	require.NoError(t, err)
	require.Equal(t, arn, tags.Tags[doorbell.TagKey], "tagged with its instance's ARN: the instance role's receive is conditioned on it")

	rings := make(chan struct{}, 10)
	var count atomic.Int64
	l := &doorbell.Listener{SQS: c, URL: b.URL(id), Wait: time.Second}
	lctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { l.Listen(lctx, func() { count.Add(1); rings <- struct{}{} }); close(done) }()
	defer func() { stop(); <-done }()

	require.Eventually(t, l.Healthy, time.Minute, 10*time.Millisecond, "a receive works")
	require.NoError(t, b.Ring(ctx, b.URL(id)))
	select {
	case <-rings:
	case <-time.After(time.Minute):
		t.Fatal("the ring was not heard")
	}
	require.NoError(t, b.Ring(ctx, ""), "an instance without a doorbell is skipped")
	require.NoError(t, b.Ring(ctx, b.URL("i-0ffffffffffffffff")), "a doorbell that is gone is no error")

	// The ring was deleted: nothing more comes unless rung again.
	attrs := func() string {
		out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(b.URL(id)),
			AttributeNames: []sqstypes.QueueAttributeName{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"}})
		require.NoError(t, err)
		return out.Attributes["ApproximateNumberOfMessages"] + "/" + out.Attributes["ApproximateNumberOfMessagesNotVisible"]
	}
	require.Eventually(t, func() bool { return attrs() == "0/0" }, time.Minute, 20*time.Millisecond, "the agent deletes rings it heard")

	// Deleting the doorbell (the instance is ending) rings too, and the listener is then unhealthy.
	before := count.Load()
	require.NoError(t, b.Delete(ctx, id))
	require.Eventually(t, func() bool { return count.Load() > before && !l.Healthy() }, time.Minute, 10*time.Millisecond,
		"a deleted doorbell makes the agent read its item and poll")
	require.NoError(t, b.Delete(ctx, id), "deleting twice is no error")

	// The sweep deletes doorbells whose instance is not live and keeps the others; a queue under
	// the prefix that names no instance is not the sweep's.
	require.NoError(t, b.Create(ctx, map[string]string{"i-0aaaaaaaaaaaaaaa3": "arn-3"}))
	stray, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(doorbell.Prefix(stack) + "zz")})
	require.NoError(t, err)
	defer c.DeleteQueue(context.WithoutCancel(ctx), &sqs.DeleteQueueInput{QueueUrl: stray.QueueUrl})
	n, err := b.Sweep(ctx, func(_ context.Context, ids []string) (map[string]bool, error) {
		require.ElementsMatch(t, []string{"i-0aaaaaaaaaaaaaaa2", "i-0aaaaaaaaaaaaaaa3"}, ids, "only this stack's doorbells")
		return map[string]bool{"i-0aaaaaaaaaaaaaaa3": true}, nil
	})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	left, err := c.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(doorbell.Prefix(stack))})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{b.URL("i-0aaaaaaaaaaaaaaa3"), *stray.QueueUrl}, left.QueueUrls)
	require.NoError(t, b.Delete(ctx, "i-0aaaaaaaaaaaaaaa3"))
}

// TestHandOverOnlyToTheInstancesOwnDoorbell, against SQS's own protocol: the sender reads a
// doorbell's tag before it hands a secret over, and sends nothing to one that an attacker
// re-tagged with another instance's ARN, or deleted and made again in its own name, nor to one
// that is not there (the instance has not made it yet); the instance's agent makes its own, and
// one that exists stays as it is.
func TestHandOverOnlyToTheInstancesOwnDoorbell(t *testing.T) {
	c := client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stack, anchor := stackBeside(ctx, t, c, "bell-own-")
	arn := func(id string) string { return "arn:aws:ec2:us-east-1:123456789012:instance/" + id }
	const victim, attacker, booting = "i-0bbbbbbbbbbbbbbb1", "i-0bbbbbbbbbbbbbbb2", "i-0bbbbbbbbbbbbbbb3"
	maker, err := doorbell.New(c, stack, anchor)
	require.NoError(t, err)
	require.NoError(t, maker.Create(ctx, map[string]string{victim: arn(victim)}))
	defer maker.Delete(context.WithoutCancel(ctx), victim, booting)
	messages := func(id string) int {
		out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(maker.URL(id)),
			AttributeNames: []sqstypes.QueueAttributeName{"ApproximateNumberOfMessages"}})
		require.NoError(t, err)
		n, err := strconv.Atoi(out.Attributes["ApproximateNumberOfMessages"])
		require.NoError(t, err)
		return n
	}
	handOver := func(id string) error {
		// A sender of its own, as a new provision or dispatcher container is: nothing read yet.
		b, err := doorbell.New(c, stack, anchor)
		require.NoError(t, err)
		b.Manages = false
		return b.HandOver(ctx, doorbell.Delivery{URL: b.URL(id), ARN: arn(id), HandOver: doorbell.HandOver{Run: "4242", Version: 5,
			Kind: doorbell.KindRegistration, Secret: "AREGSECRET"}})
	}

	require.NoError(t, handOver(victim), "its own doorbell")
	require.Equal(t, 1, messages(victim))

	_, err = c.TagQueue(ctx, &sqs.TagQueueInput{QueueUrl: aws.String(maker.URL(victim)), Tags: map[string]string{doorbell.TagKey: arn(attacker)}})
	require.NoError(t, err)
	require.ErrorContains(t, handOver(victim), "not sent: the doorbell is tagged for "+arn(attacker))
	require.Equal(t, 1, messages(victim), "nothing sent to a doorbell re-tagged for another instance")

	require.NoError(t, maker.Delete(ctx, victim))
	_, err = c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(doorbell.Name(stack, victim)),
		Tags: map[string]string{doorbell.TagKey: arn(attacker)}})
	require.NoError(t, err)
	require.ErrorContains(t, handOver(victim), "not sent: the doorbell is tagged for "+arn(attacker))
	require.Zero(t, messages(victim), "nothing sent to a doorbell made again in another instance's name")

	require.ErrorContains(t, handOver(booting), "the doorbell is not there")
	_, err = doorbell.Own(ctx, c, "", anchor, booting, arn(booting))
	require.ErrorContains(t, err, "want an instance id, a stack name and a queue URL")
	url, err := doorbell.Own(ctx, c, doorbell.StackOf(anchor, "pool"), anchor, booting, arn(booting))
	require.NoError(t, err, "the agent makes its own as it boots")
	require.Equal(t, maker.URL(booting), url, "named as the control plane names it, whatever its item says")
	_, err = doorbell.Own(ctx, c, stack, anchor, booting, arn(booting))
	require.NoError(t, err, "and again after a restart")
	require.NoError(t, handOver(booting))
	require.Equal(t, 1, messages(booting))
}

// TestOwnerReadAgainAfterItsTTL: a doorbell's tag is trusted for ownerTTL only (half the minute
// SQS waits before a deleted queue's name can be taken again), so that one deleted while its
// instance lives (its item written terminated by a workflow, then swept) and made again in
// another instance's name gets no secret.
func TestOwnerReadAgainAfterItsTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := &fake.SQS{}
	now := time.Now()
	b := &doorbell.Bells{SQS: q, Stack: fake.Stack, Base: fake.QueueURLBase, Manages: true, Now: func() time.Time { return now }}
	const victim = "i-0ccccccccccccccc1"
	arn := func(who string) string { return "arn:aws:ec2:us-east-1:123456789012:instance/" + who }
	require.NoError(t, b.Create(ctx, map[string]string{victim: arn(victim)}))
	d := doorbell.Delivery{URL: b.URL(victim), ARN: arn(victim), HandOver: doorbell.HandOver{Run: "j9", Version: 3, Kind: doorbell.KindJIT, Secret: "config"}}
	require.NoError(t, b.HandOver(ctx, d))

	_, err := q.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(b.URL(victim))})
	require.NoError(t, err)
	_, err = q.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(doorbell.Name(fake.Stack, victim)),
		Tags: map[string]string{doorbell.TagKey: arn("i-0ddddddddddddddd2")}})
	require.NoError(t, err)
	now = now.Add(time.Minute) // SQS keeps the name from anyone for a minute after the delete
	require.ErrorContains(t, b.HandOver(ctx, d), "not sent: the doorbell is tagged for "+arn("i-0ddddddddddddddd2"))
	require.Empty(t, q.Bodies(b.URL(victim)), "nothing reached the doorbell made again")
}
