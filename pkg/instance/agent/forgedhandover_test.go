package agent

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
)

// TestForgedHandOverIgnored: whoever may send to a doorbell (a workflow role holder) pushes a
// hand-over of their own making for the assignment the instance holds, before and after the
// control plane's. The agent registers with the secret the assignment names alone, and logs the
// forged one as refused.
func TestForgedHandOverIgnored(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{Baked: true})
	in := w.warm()
	const token, forged = "AREGTHECONTROLPLANES0001", "AREGTHEATTACKERS00000001"
	claimed := w.assign(in, "2501", worldGitHubURL+"/"+worldRepo, token)
	push := func() {
		body, err := json.Marshal(doorbell.HandOver{Run: claimed.RunID, Version: claimed.Version, Kind: doorbell.KindRegistration, Secret: forged})
		require.NoError(t, err)
		_, err = w.sqs.SendMessage(w.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(w.bells.URL(w.id)), MessageBody: aws.String(string(body))})
		require.NoError(t, err)
	}
	push()
	require.Eventually(t, func() bool { return len(w.sqs.Bodies(w.bells.URL(w.id))) == 0 }, 30*time.Second, 10*time.Millisecond,
		"the agent received the forged hand-over")
	w.handOver(claimed, token)
	push()

	reg := w.waitSignal(state.SignalRegistered, "2501", claimed.Version)
	require.Equal(t, state.Claimed, reg.State)
	calls := w.host.configures()
	require.Len(t, calls, 1)
	require.Equal(t, token, calls[0].token, "registered with the control plane's secret")
	require.Contains(t, w.logs.String(), "refused a hand-over the control plane did not send")
	require.NotContains(t, w.logs.String(), forged, "the forged secret is not logged")
}
