package offers_test

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

// TestDirectoryRoutesOffersAndCountsThem: the directory offers each instance on its own pool's
// queue, found through the published documents, and reports each queue's depth.
func TestDirectoryRoutesOffersAndCountsThem(t *testing.T) {
	t.Parallel()
	testbed.Require(t)
	ctx := testbed.Context(t, time.Minute)
	e := newEnv(t)
	otherURL, otherDLQ := createQueues(t, e.sqs, testbed.Name(t, "hangar-arm64"))
	stack := testbed.Name(t, "stack")
	client := ssm.NewFromConfig(testbed.AWSConfig(t))
	raw, err := os.ReadFile("../../contract/pooldoc/testdata/pool.json")
	require.NoError(t, err)
	publish := func(name, url, dlq string) {
		var m map[string]any
		require.NoError(t, json.Unmarshal(raw, &m))
		m["name"], m["queueUrl"], m["deadLetterQueueUrl"] = name, url, dlq
		b, _ := json.Marshal(m)
		_, err := client.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(pooldoc.ParameterName(stack, name)),
			Value: aws.String(string(b)), Type: ssmtypes.ParameterTypeString, Overwrite: aws.Bool(true)})
		require.NoError(t, err)
	}
	publish(poolName, e.url, e.dlqURL)
	publish("arm64", otherURL, otherDLQ)

	dir := &offers.Directory{Loader: &pooldoc.Loader{SSM: client, Stack: stack}, SQS: e.sqs}
	idle := func(pool string) *state.Instance {
		in := &state.Instance{ID: newID(), Pool: pool, Threshold: time.Now().Add(10 * time.Minute), Spec: spotC7}
		require.NoError(t, e.store.Create(ctx, []*state.Instance{in}))
		out, err := e.store.Transition(ctx, state.Change{InstanceID: in.ID, Pool: pool, From: state.Created, To: state.Idle,
			Version: 1, Threshold: time.Now().Add(30 * time.Minute)})
		require.NoError(t, err)
		return out
	}
	x64, arm, arm2 := idle(poolName), idle("arm64"), idle("arm64")
	require.NoError(t, dir.Publish(ctx, x64, arm, arm2))

	depth, err := dir.Depth(ctx, "arm64")
	require.NoError(t, err)
	require.Equal(t, 2, depth)
	require.Equal(t, map[string]int{x64.ID: 1}, e.offered(), "the x64 pool's queue holds only its own instance")
	var armOffers []string
	for _, m := range drain(t, e.sqs, otherURL) {
		pm, err := offers.ParseMessage(aws.ToString(m.Body), "arm64")
		require.NoError(t, err)
		armOffers = append(armOffers, pm.InstanceID)
	}
	require.ElementsMatch(t, []string{arm.ID, arm2.ID}, armOffers)

	err = dir.Publish(ctx, idle("missing"))
	require.ErrorContains(t, err, "offer 1 instances to pool missing")
}
