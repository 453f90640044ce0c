package badinput

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// poisonCase is a pool message no claimer can use.
type poisonCase struct {
	name string
	body func(pool string) string
	want []string // in ParseMessage's error: the field and what it accepts
}

// offerDeadline is the idle deadline of the made-up offers: the same in every body built.
var offerDeadline = time.Now().Add(time.Hour).UnixMilli()

// goodMessage is a well-formed offer of a made-up instance, as JSON fields to spoil.
func goodMessage(pool string) map[string]any {
	return map[string]any{"v": 1, "instanceArn": "arn:aws:ec2:us-east-1:" + localenv.Account + ":instance/i-0badc0ffee0000001",
		"instanceId": "i-0badc0ffee0000001", "pool": pool, "instanceType": "c7i.large", "usageClass": "on-demand", "vcpu": 2,
		"memoryMiB": 4096, "az": "us-east-1a", "specHash": "local", "version": 3,
		"idleDeadline": offerDeadline}
}

// spoiled returns a good message with fields changed (a nil value removes the field).
func spoiled(change map[string]any) func(string) string {
	return func(pool string) string {
		m := goodMessage(pool)
		for k, v := range change {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
}

// poisonCases are the poison messages: each is checked by offers.ParseMessage, and all are sent to
// the pool's queue ahead of the world's first provision.
func poisonCases() []poisonCase {
	return []poisonCase{
		{"not JSON", func(string) string { return "claim me <script>" }, []string{"poison pool message: not JSON"}},
		{"unknown schema version", spoiled(map[string]any{"v": 2}), []string{"schema version 2: want 1"}},
		{"another pool's name", spoiled(map[string]any{"pool": "gpu-x64"}), []string{`pool "gpu-x64" on the queue of pool`}},
		{"version zero", spoiled(map[string]any{"version": 0}), []string{"version 0: want 1 or more"}},
		{"no idle deadline", spoiled(map[string]any{"idleDeadline": nil}), []string{"idleDeadline 0: want Unix milliseconds"}},
		{"unknown usage class", spoiled(map[string]any{"usageClass": "reserved"}), []string{`usageClass "reserved": want spot or on-demand`}},
		{"malformed instance id", spoiled(map[string]any{"instanceId": "i-$(reboot)"}),
			[]string{`instance id "i-$(reboot)" is malformed: want i- followed by 8 to 17 lowercase hex digits`}},
		{"ARN of another instance", spoiled(map[string]any{"instanceArn": "arn:aws:ec2:us-east-1:" + localenv.Account + ":instance/i-0badc0ffee0000002"}),
			[]string{"instanceArn", `names another instance than instanceId "i-0badc0ffee0000001"`}},
		{"no instance type", spoiled(map[string]any{"instanceType": nil}), []string{"instanceType is empty"}},
	}
}

// poisonOutcome is what the world's first provision did with the poison messages.
type poisonOutcome struct {
	sent         map[string]string // message id → body
	dlq          map[string][]deadLetter
	provisionLog string
	created      string
}

// deadLetter is a message found in the dead-letter queue.
type deadLetter struct {
	reason, pool string
}

// sendPoison sends every poison message to the pool's queue (empty as yet).
func (w *world) sendPoison(t *testing.T, cases []poisonCase) poisonOutcome {
	t.Helper()
	client := sqs.NewFromConfig(w.AWS)
	out := poisonOutcome{sent: map[string]string{}}
	for _, c := range cases {
		body := c.body(w.Pool)
		res, err := client.SendMessage(w.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(w.Doc.QueueURL), MessageBody: aws.String(body)})
		require.NoError(t, err)
		out.sent[aws.ToString(res.MessageId)] = body
	}
	return out
}

// deadLetters reads the pool's dead-letter queue, by body, without consuming it for long.
func (w *world) deadLetters(t *testing.T) map[string][]deadLetter {
	t.Helper()
	client := sqs.NewFromConfig(w.AWS)
	out := map[string][]deadLetter{}
	seen := map[string]bool{}
	for empty := 0; empty < 2; {
		res, err := client.ReceiveMessage(w.ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.Doc.DeadLetterQueueURL),
			MaxNumberOfMessages: 10, VisibilityTimeout: 30, MessageAttributeNames: []string{"All"}})
		require.NoError(t, err)
		if len(res.Messages) == 0 {
			empty++
			continue
		}
		for _, m := range res.Messages {
			if seen[aws.ToString(m.MessageId)] {
				continue
			}
			seen[aws.ToString(m.MessageId)] = true
			attr := func(k string) string { return aws.ToString(m.MessageAttributes[k].StringValue) }
			out[aws.ToString(m.Body)] = append(out[aws.ToString(m.Body)], deadLetter{reason: attr("hangar-reason"), pool: attr("hangar-pool")})
		}
	}
	return out
}

// poisonRun checks one poison message: ParseMessage refuses it naming the field, and the world's
// first provision moved it, once, to the dead-letter queue with the reason, logged its id, and
// still created what it was asked for.
func (w *world) poisonRun(c poisonCase) func(t *testing.T) {
	return func(t *testing.T) {
		body := c.body(w.Pool)
		_, err := offers.ParseMessage(body, w.Pool)
		require.ErrorIs(t, err, offers.ErrPoison)
		for _, x := range c.want {
			require.Contains(t, err.Error(), x)
		}
		var id string
		for mid, b := range w.poison.sent {
			if b == body {
				id = mid
			}
		}
		require.NotEmpty(t, id, "the message was sent")
		letters := w.poison.dlq[body]
		require.Len(t, letters, 1, "moved to the dead-letter queue exactly once")
		require.Equal(t, w.Pool, letters[0].pool)
		require.Equal(t, err.Error(), letters[0].reason, "the reason travels with it")
		require.Contains(t, w.poison.provisionLog, fmt.Sprintf("messageId=%s", id), "the provision logged the message's id")
		require.Equal(t, "2", w.poison.created, "the provision still created what it was asked for")
	}
}
