package offers_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// TestDirectoryRoutesOffersAndCountsThem: the directory offers each instance on its own pool's
// queue, found through the published documents, and reports each queue's depth.
func TestDirectoryRoutesOffersAndCountsThem(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	arm := fake.Pool(t, "arm64", nil) // its own queue and dead-letter queue
	b, err := json.Marshal(arm)
	require.NoError(t, err)
	w.SSM.Put(pooldoc.ParameterName(fake.Stack, arm.Name), string(b))
	require.NotEqual(t, w.Doc.QueueURL, arm.QueueURL)

	dir := w.Pools // the real directory, reading the documents from the fake SSM
	x64, arm1, arm2 := w.idleIn(w.pool, spotC7, false), w.idleIn("arm64", spotC7, false), w.idleIn("arm64", spotC7, false)
	require.NoError(t, dir.Publish(w.ctx, x64, arm1, arm2))

	depth, err := dir.Depth(w.ctx, "arm64")
	require.NoError(t, err)
	require.Equal(t, 2, depth)
	depth, err = dir.Depth(w.ctx, w.pool)
	require.NoError(t, err)
	require.Equal(t, 1, depth)
	require.Equal(t, map[string]int{x64.ID: 1}, w.offered(), "the x64 pool's queue holds only its own instance")
	armOffers, err := w.SQS.Offered(arm.QueueURL, "arm64")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{arm1.ID, arm2.ID}, armOffers)
	require.Equal(t, 2, w.SQS.Calls("SendMessageBatch"), "one batch per pool")

	lost := *w.idleIn(w.pool, spotC7, false)
	lost.Queue = "" // an item that does not say where it goes back is offered nowhere
	err = dir.Publish(w.ctx, &lost)
	require.ErrorContains(t, err, "offer 1 instances to pool linux: its items name no queue")
}
