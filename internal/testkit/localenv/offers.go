package localenv

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// Offered receives every visible offer of the pool's queue (hiding them for a minute, so call it
// once, at the end of a test) and counts them by instance id.
func (e *Env) Offered(ctx context.Context) (map[string]int, error) {
	client := sqs.NewFromConfig(e.AWS)
	out := map[string]int{}
	for {
		msgs, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.Doc.QueueURL),
			MaxNumberOfMessages: 10, VisibilityTimeout: 60})
		if err != nil {
			return nil, fmt.Errorf("read the offers of pool %s: %w", e.Pool, err)
		}
		if len(msgs.Messages) == 0 {
			return out, nil
		}
		for _, m := range msgs.Messages {
			pm, err := offers.ParseMessage(aws.ToString(m.Body), e.Pool)
			if err != nil {
				return nil, err
			}
			out[pm.InstanceID]++
		}
	}
}
