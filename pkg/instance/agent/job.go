package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
)

// Returning the instance again: while its item still holds a job the agent has finished (its
// return and the completed webhook both lost), the return is sent again this often, this many
// times.
const (
	returnAgainEvery = 30 * time.Second
	returnAgainTimes = 10
)

// returning is what the reuse loop remembers of the last return it sent.
type returning struct {
	ret   jobs.Return
	at    time.Time
	times int
}

// checkJob refuses a label-routed job's assignment that is not what the dispatcher writes: the
// key names directories the agent removes as root, the repository goes into the job-started
// hook, and the runner URL must be on the pool's GitHub server.
func checkJob(it *state.Instance, server string) error {
	if !names.IsJobKey(it.RunID) {
		return fmt.Errorf("job key %q: want j<job id>", it.RunID)
	}
	if err := names.ValidateRepository(it.Repo); err != nil {
		return err
	}
	return checkRunnerURL(it.RunnerURL, it.Repo, server)
}

// serveJob serves a label-routed job: it starts a just-in-time runner with the configuration
// handed to this instance alone (its doorbell), as the runner user, in the job's cgroup, with the job-started hook
// that refuses jobs of other repositories. The runner takes one job and exits; the agent then
// ends the job on the instance exactly as it ends a run after release (kill, clear, check),
// signals DEREGISTERED (FAILED when cleaning fails) and says so on the returns queue. When the
// item lets the job go first (the completed webhook, or a runner that got no job), the agent stops
// the runner and does the same. An error is returned only when the agent must stop.
func (a *Agent) serveJob(ctx context.Context, item *state.Instance) error {
	key, version := item.RunID, item.Version
	log := a.log.With("job", key)
	a.jobServed = key
	noticed := a.now()
	log.Info("job noticed", "version", version, "state", item.State, "detectionMs", noticed.Sub(item.UpdatedAt).Milliseconds())
	switch err := a.ack(ctx, version, noticed); {
	case errors.Is(err, state.ErrConflict):
		log.Info("the job moved on before it was acknowledged; not serving it", "version", version, "error", err)
		return nil
	case err != nil:
		log.Warn("could not acknowledge the job; not serving it until the acknowledgement is written", "error", err)
		a.jobServed = "" // try again: nothing of it was used
		return a.sleep(ctx, wait.Jitter(a.cfg.PollInterval))
	}
	dir := a.runDir(key, 0)
	onHost, err := a.host.OpenRun(dir)
	if err != nil {
		a.jobFailed(ctx, item, dir, "", err)
		return nil
	}
	defer onHost.Close()
	config, err := a.handOver(ctx, item, doorbell.KindJIT)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		a.jobFailed(ctx, item, dir, "", fmt.Errorf("the runner configuration: %w", err))
		return nil
	}
	if err := onHost.Make(a.cfg.RunnerDir); err != nil {
		a.jobFailed(ctx, item, dir, "", err)
		return nil
	}
	proc, err := startRunner(onHost, "", item.Repo, config)
	if err != nil {
		a.jobFailed(ctx, item, dir, "", err)
		return nil
	}
	// The runner's exit is waited on with the item: it rings, so that the next read is now.
	go func() {
		<-proc.done
		a.ring()
	}()
	switch err := a.store.Signal(ctx, state.Signal{Name: state.SignalRegistered, Run: key, Version: version, At: a.now()}); {
	case err == nil:
		log.Info("runner started", "signal", state.SignalRegistered, "ms", a.now().Sub(noticed).Milliseconds())
	case errors.Is(err, state.ErrConflict):
		log.Info("the job moved on before REGISTERED could be written", "error", err)
	default:
		log.Warn("could not signal REGISTERED", "error", err)
	}
	stopWatch := a.watchStrays(ctx, onHost, log)
	latest, err := a.waitFor(ctx, func(it *state.Instance) bool { return it.RunID != key || exited(proc) }, nil)
	stopWatch()
	if exited(proc) && err == nil && latest.RunID == key && latest.State != state.Running && !proc.took.Load() {
		// The runner ended without ever taking its job (removed from GitHub before it
		// connected, or dead on start): the job was not served, and is placed again.
		cause := errors.New("the just-in-time runner exited before it took a job")
		if proc.err != nil {
			cause = fmt.Errorf("the just-in-time runner exited before it took a job: %w", proc.err)
		}
		a.jobFailed(ctx, item, dir, proc.out.String(), cause)
		return nil
	}
	if exited(proc) {
		log.Info("runner exited after its job", "error", proc.err, "output", lastLines(proc.out.String(), 5))
	} else if stopErr := onHost.Stop(a.cfg.StopTimeout); stopErr != nil {
		log.Warn("stop runner", "error", stopErr)
	}
	if err != nil {
		return err // ctx ended or the instance is terminating: nothing to give back
	}
	a.finishJob(ctx, key, version, dir, false)
	return nil
}

// finishJob ends the job on the instance (giveBack: kill, clear, check; DEREGISTERED, or FAILED)
// and returns the instance: lost says the runner died mid-job with an earlier agent.
func (a *Agent) finishJob(ctx context.Context, key string, version int64, dir string, lost bool) {
	a.giveBack(ctx, key, dir, time.Time{})
	a.returning = returning{ret: jobs.Return{InstanceID: a.cfg.Identity.InstanceID, Key: key, Version: version, Lost: lost}}
	a.sendReturn(ctx)
}

// returnInterrupted says that a job an earlier agent was serving is over on this instance (the
// scrub at start ended it: kill, clear, check) and returns the instance, as finishJob would have,
// whether the item still assigns the job or has let it go meanwhile.
func (a *Agent) returnInterrupted(ctx context.Context, key string) {
	a.log.Warn("a job was being served when the agent restarted; its runner is lost, the scrub ended it, and the instance goes back",
		"job", key)
	a.jobServed = key
	if err := a.signalLatest(ctx, state.Signal{Name: state.SignalDeregistered, Run: key}); err != nil {
		a.log.Warn("could not signal DEREGISTERED", "job", key, "error", err)
		return
	}
	a.returning = returning{ret: jobs.Return{InstanceID: a.cfg.Identity.InstanceID, Key: key, Version: 1, Lost: true}}
	if it := a.last.Load(); it != nil {
		a.returning.ret.Version = it.Version
	}
	a.sendReturn(ctx)
}

// jobFailed reports a job the agent could not start a runner for (REGISTER_FAILED, after cleaning
// up), and returns the instance: the dispatcher gives it back; the job waits for another runner.
func (a *Agent) jobFailed(ctx context.Context, item *state.Instance, dir, out string, cause error) {
	_, _ = a.registerFailed(ctx, item, dir, out, cause)
	a.returning = returning{ret: jobs.Return{InstanceID: a.cfg.Identity.InstanceID, Key: item.RunID, Version: item.Version}}
	a.sendReturn(ctx)
}

// sendReturn puts the last return on the returns queue.
func (a *Agent) sendReturn(ctx context.Context) {
	if a.Returns == nil || a.cfg.Pool.ReturnsQueueURL == "" || a.returning.ret.Key == "" {
		return
	}
	a.returning.at = a.now()
	a.returning.times++
	body, err := a.returning.ret.Encode()
	if err == nil {
		_, err = a.Returns.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &a.cfg.Pool.ReturnsQueueURL, MessageBody: &body})
	}
	if err != nil {
		a.log.Warn("could not say the job is done; the control plane learns it from the job's completed webhook", "job", a.returning.ret.Key, "error", err)
		return
	}
	a.log.Info("returned the instance", "job", a.returning.ret.Key, "times", a.returning.times)
}

// returnAgain sends the last return again while the item still holds that job: both the return
// and the completed webhook were lost, or arrived before the agent's signal.
func (a *Agent) returnAgain(ctx context.Context, it *state.Instance) {
	r := a.returning
	if r.ret.Key == "" || it.RunID != r.ret.Key || r.times >= returnAgainTimes || a.now().Sub(r.at) < returnAgainEvery {
		return
	}
	a.sendReturn(ctx)
}

// servedBefore reports whether a job's assignment, first seen by this agent, was served by an
// agent before it: acknowledged already, or running (the runner took a job).
func servedBefore(it *state.Instance) bool {
	return it.State == state.Running || it.AckVersion >= it.Version
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
