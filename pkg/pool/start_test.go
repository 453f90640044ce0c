package pool_test

import (
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
)

// TestStartStoppedWaitsOutStopping: an instance refresh stopped a moment ago is still stopping,
// which EC2 refuses to start: the start is tried again on a growing, jittered backoff until EC2
// takes it; any other refusal fails at once.
func TestStartStoppedWaitsOutStopping(t *testing.T) {
	t.Parallel()
	w := fake.NewWorld(t, nil)
	clock := &fake.Clock{}
	w.Pool.Clock = clock
	in := w.AddIdle(t, fake.Idle{Stopped: true})
	stopping := fake.APIError("IncorrectInstanceState", "The instance '"+in.ID+"' is not in a state from which it can be started.")
	w.EC2.Inject("StartInstances", stopping, stopping)

	require.NoError(t, w.Pool.StartStopped(ctx(t), []string{in.ID}))
	require.Equal(t, 3, w.EC2.Calls("StartInstances"))
	require.Equal(t, ec2types.InstanceStateNameRunning, w.EC2.State(in.ID))
	sleeps := clock.Sleeps()
	require.Len(t, sleeps, 2, "one wait before each try again")
	require.InDelta(t, 0.75*float64(time.Second), float64(sleeps[0]), float64(250*time.Millisecond), "the first step: a second, jittered")
	require.Greater(t, sleeps[1], sleeps[0]/2, "growing")

	w.EC2.Inject("StartInstances", fake.APIError("UnauthorizedOperation", "not yours"))
	require.ErrorContains(t, w.Pool.StartStopped(ctx(t), []string{in.ID}), "UnauthorizedOperation")
	require.Len(t, clock.Sleeps(), 2, "no wait for a refusal that will not pass")
}
