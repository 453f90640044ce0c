package agent_test

import (
	"os"
	osuser "os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestStartedFromStoppedSkipsInit: a warm instance that is stopped and started again (the
// stopped part of a warm pool, claimed) goes straight to the reuse loop: the pre-runner script
// ran once for the spec, not again. What an earlier agent left of a run is removed at start.
func TestStartedFromStoppedSkipsInit(t *testing.T) {
	t.Parallel()
	counter, err := os.CreateTemp("", "hangar-prerunner-")
	require.NoError(t, err)
	require.NoError(t, counter.Close())
	t.Cleanup(func() { _ = os.Remove(counter.Name()) })
	e := newEnv(t, envOptions{Baked: true, PreRunner: "echo ran >> " + counter.Name()})
	id := e.launch(time.Time{})
	e.warm(id)

	_, err = e.EC2.StopInstances(e.ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.Sim.AgentPID(id) == 0 }, time.Minute, 50*time.Millisecond, "the agent stops with its machine")
	// What an agent stopped mid-run (or crashed) would leave: the run's directory, a file in the
	// runner user's home and one in /tmp.
	user := e.Sim.RunnerUser(id)
	u, err := osuser.Lookup(user)
	require.NoError(t, err)
	uid, _ := strconv.Atoi(u.Uid)
	leftRun := filepath.Join(e.Sim.RunsDir(id), "2299-1", "work")
	require.NoError(t, os.MkdirAll(leftRun, 0o755))
	leftTmp := filepath.Join(os.TempDir(), "left-by-"+strings.TrimPrefix(id, "i-"))
	leftHome := filepath.Join(u.HomeDir, "left-behind")
	for _, f := range []string{filepath.Join(leftRun, "secret"), leftTmp, leftHome} {
		require.NoError(t, os.WriteFile(f, []byte("x"), 0o644))
		require.NoError(t, os.Lchown(f, uid, uid))
	}
	_, err = e.EC2.StartInstances(e.ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.Sim.AgentPID(id) != 0 }, time.Minute, 50*time.Millisecond, "the agent starts with its machine")

	claimed := e.claim(e.must(e.Store.Get(e.ctx, id)), "2301")
	e.waitSignal(id, state.SignalRegistered, "2301", claimed.Version)
	b, err := os.ReadFile(counter.Name())
	require.NoError(t, err)
	require.Equal(t, "ran\n", string(b), "the pre-runner script ran once, not on the second start")
	require.Contains(t, e.Sim.AgentLog(id), "initialised before for this spec")
	for _, f := range []string{filepath.Join(e.Sim.RunsDir(id), "2299-1"), leftTmp, leftHome} {
		_, err := os.Lstat(f)
		require.True(t, os.IsNotExist(err), "%s, left before the restart, is still there", f)
	}
}
