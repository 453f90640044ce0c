package agent_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestThreeAssignmentsInARow: one instance serves three runs one after another. Each time the
// runner registers with the run's label only, takes that run's job and not another's, is removed
// from GitHub on release, and the work directory is wiped before the next run.
func TestThreeAssignmentsInARow(t *testing.T) {
	t.Parallel()
	// The agent reads its item on its own only every 30 s: whatever it does sooner, the doorbell's
	// ring told it, however slow a busy machine makes the ring.
	e := newEnv(t, envOptions{AgentArgs: []string{"--poll-interval", "30s"}})
	id := e.launch(time.Time{})
	in := e.warm(id)

	for i, run := range []string{"1001", "1002", "1003"} {
		claimed := e.claim(in, run)
		reg := e.waitSignal(id, state.SignalRegistered, run, claimed.Version)
		running := e.transition(state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: reg.Version, RunID: run})

		runners := e.GH.Runners(repo)
		require.Len(t, runners, 1, "run %s", run)
		require.Equal(t, e.RunnerNames().Name(id, run), runners[0].Name)
		require.Equal(t, []string{run, run + "-linux"}, runners[0].Labels, "the run id, the pool's label as a composite, no GitHub defaults")

		other := e.GH.QueueJob(repo, []string{"9" + run}, "echo not mine")
		bare := e.GH.QueueJob(repo, []string{"linux"}, "echo any job asking for the pool's label")
		job := e.GH.QueueJob(repo, []string{run}, `test ! -e secret.txt && echo clean; echo "from `+run+`" > secret.txt; echo ran on $RUNNER_NAME`)
		done, err := e.GH.WaitJob(e.ctx, job)
		require.NoError(t, err)
		require.Equal(t, "success", done.Conclusion, "run %s: a previous run's file was left in the workspace:\n%s", run, done.Output)
		require.Contains(t, done.Output, "clean")
		require.Equal(t, e.RunnerNames().Name(id, run), done.RunnerName)
		j, _ := e.GH.Job(other)
		require.Equal(t, "queued", j.Status, "a job of another run never lands here")
		j, _ = e.GH.Job(bare)
		require.Equal(t, "queued", j.Status, "a job asking runs-on: [linux] never lands on a run's runner")
		pooled := e.GH.QueueJob(repo, []string{run + "-linux"}, "echo pool within the run")
		done, err = e.GH.WaitJob(e.ctx, pooled)
		require.NoError(t, err)
		require.Equal(t, "success", done.Conclusion, "a job of the run targets the pool within it with <run>-<label>")

		// The doorbell's listener deletes the hand-over's message, then polls again, only once the
		// agent has acted on it (agent.settled). Release once the doorbell is empty again, so that
		// the ring below times the ring's delivery alone, not that delete on a slow emulator.
		require.Eventually(t, func() bool {
			out, err := sqs.NewFromConfig(e.AWS).GetQueueAttributes(e.ctx, &sqs.GetQueueAttributesInput{QueueUrl: &running.Bell,
				AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
			return err == nil && out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)] == "0" &&
				out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)] == "0"
		}, 30*time.Second, 50*time.Millisecond, "run %s: the doorbell still holds the hand-over", run)
		released := e.release(running)
		dereg := e.waitSignal(id, state.SignalDeregistered, run, released.Version)
		// deregMs times the whole give-back from the ring that told of it (release's first read
		// waits on it): at most the time from the release's write to the signal, and short of it
		// only by the ring's delivery.
		total := dereg.SignalAt.Sub(released.UpdatedAt)
		took := time.Duration(dereg.DeregisterMs) * time.Millisecond
		require.Positive(t, took, "run %s", run)
		require.LessOrEqual(t, took, total+2*time.Millisecond, "run %s: from the ring, which follows the write", run)
		require.Greater(t, took, total-10*time.Second, "run %s: from the ring, not from a later read (%s of %s)", run, took, total)
		require.Empty(t, e.GH.Runners(""), "run %d: nothing stale remains on GitHub", i+1)
		left, err := os.ReadDir(e.Sim.RunsDir(id))
		require.NoError(t, err)
		require.Empty(t, left, "run %d: its runner copy and work directory are gone", i+1)
		in = dereg
	}
	require.Equal(t, 3, e.GH.Registrations())
	checkAgentWrites(t, e, id)
}

// checkAgentWrites proves from the recorded DynamoDB traffic that the agent only ever read its
// item and updated its own attributes: never state, runId, threshold or any other.
func checkAgentWrites(t *testing.T, e *env, id string) {
	t.Helper()
	reqs := e.Sim.Requests(id)
	require.NotEmpty(t, reqs)
	var updates int
	for _, r := range reqs {
		switch r.Op {
		case "DynamoDB.GetItem":
		case "DynamoDB.UpdateItem":
			updates++
			key, written := updatedAttributes(t, r.Body)
			require.Equal(t, e.Store.Account().ARN(id), key, "the agent wrote another item")
			for _, a := range written {
				require.Contains(t, state.AgentAttributes, a, "the agent wrote %q: %s", a, r.Body)
			}
		default:
			require.Failf(t, "unexpected request", "the agent sent %s: %s", r.Op, r.Body)
		}
	}
	require.Positive(t, updates)
}

// updatedAttributes returns the key and the attributes an UpdateItem request sets or removes.
func updatedAttributes(t *testing.T, body []byte) (string, []string) {
	t.Helper()
	var req struct {
		Key                      map[string]map[string]string
		UpdateExpression         string
		ExpressionAttributeNames map[string]string
	}
	require.NoError(t, json.Unmarshal(body, &req))
	var out []string
	clause := regexp.MustCompile(`(?i)\b(SET|REMOVE|ADD|DELETE)\b`)
	parts := clause.Split(req.UpdateExpression, -1)
	for _, part := range parts {
		for _, action := range strings.Split(part, ",") {
			fields := strings.Fields(strings.SplitN(action, "=", 2)[0])
			if len(fields) == 0 {
				continue
			}
			path := fields[0]
			if name, ok := req.ExpressionAttributeNames[path]; ok {
				path = name
			}
			out = append(out, path)
		}
	}
	require.NotEmpty(t, out, "no attributes in %q", req.UpdateExpression)
	return req.Key["instanceArn"]["S"], out
}
