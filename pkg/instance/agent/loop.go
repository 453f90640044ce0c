package agent

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghurl"
	"github.com/hangar-ci/hangar/pkg/platform/wait"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
)

// assigned reports whether the item hands the instance a run to serve.
func assigned(it *state.Instance) bool {
	switch it.State {
	case state.Created, state.Claimed, state.Running:
		return it.RunID != "" && it.RunnerURL != ""
	}
	return false
}

// loop is the reuse loop: wait for a run (or a label-routed job), serve it, give it back, again.
func (a *Agent) loop(ctx context.Context) error {
	var failedVersion int64 // the assignment whose registration failed: not tried twice
	var found int64         // the version of the item the last wait found
	if key := a.interrupted; key != "" {
		a.interrupted = ""
		a.returnInterrupted(ctx, key)
	}
	for {
		a.acked = 0
		accept := func(run string, version int64) bool {
			return !a.draining.Load() && version != failedVersion && run != a.jobServed
		}
		item, err := a.waitWith(ctx, a.readAssigned(found, accept), func(it *state.Instance) bool {
			a.returnAgain(ctx, it)
			return assigned(it) && accept(it.RunID, it.Version)
		}, nil)
		if err != nil {
			a.log.Info("agent stopping", "reason", err)
			return err
		}
		found = item.Version
		if names.IsJobKey(item.RunID) {
			if servedBefore(item) {
				// Served by the agent before this one, which stopped (or crashed) mid-job: the
				// runner died with it (systemd kills the unit's cgroup), and a just-in-time runner
				// cannot be taken back. Wipe, and return the instance.
				a.log.Warn("the job was being served when the agent restarted; its runner is lost, the instance goes back",
					"job", item.RunID, "version", item.Version, "state", item.State)
				a.jobServed = item.RunID
				a.finishJob(ctx, item.RunID, item.Version, a.runDir(item.RunID, 0), true)
				continue
			}
			if err := checkJob(item, a.cfg.Pool.GitHubURL); err != nil {
				a.refuseAssignment(ctx, item, err)
				failedVersion = item.Version
				continue
			}
			if err := a.serveJob(ctx, item); err != nil {
				return err
			}
			continue
		}
		if err := checkAssignment(item, a.cfg.Pool.GitHubURL); err != nil {
			// Never from provision, which validates all of it: someone wrote the item by hand or
			// worse. Nothing of it reaches a path, a command line or a label.
			a.refuseAssignment(ctx, item, err)
			failedVersion = item.Version
			continue
		}
		if failed, err := a.serve(ctx, item); err != nil {
			return err
		} else if failed {
			failedVersion = item.Version
		}
	}
}

// checkAssignment refuses an assignment whose run id, attempt, labels, repository or runner URL
// are not what provision writes: the run id names a directory the agent removes as root, the
// labels go to config.sh, the run id and repository into the job-started hook, and the
// registration token goes to the runner URL, which must be on server (the pool document's GitHub
// server).
func checkAssignment(it *state.Instance, server string) error {
	if err := names.ValidateRunID(it.RunID); err != nil {
		return err
	}
	if it.RunAttempt < 0 || it.RunAttempt > maxRunAttempt {
		return fmt.Errorf("run attempt %d: want 0 to %d", it.RunAttempt, maxRunAttempt)
	}
	for _, l := range it.Labels {
		if err := names.ValidateLabel(l); err != nil {
			return fmt.Errorf("label %w", err)
		}
	}
	if it.RunnerGroup != "" {
		if err := names.ValidateRunnerGroup(it.RunnerGroup); err != nil || strings.HasPrefix(it.RunnerGroup, "-") {
			return fmt.Errorf("runner group %q: want an organisation runner group's name, not starting with '-'", it.RunnerGroup)
		}
	}
	if err := names.ValidateRepository(it.Repo); err != nil {
		return err
	}
	return checkRunnerURL(it.RunnerURL, it.Repo, server)
}

// checkRunnerURL refuses a runner URL other than one provision writes for repo: the repository's
// or its owner's page on server, the GitHub server the pool document pins (which workflows, who
// may write the item, cannot change), nothing else in it. The registration token goes there, so
// the check comes before anything is sent. Plain http passes only in the local world's builds
// (ghurl.CheckURL).
func checkRunnerURL(raw, repo, server string) error {
	u, err := url.Parse(raw)
	if err != nil || repo == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Host == "" ||
		(u.Path != "/"+repo && u.Path != "/"+names.Owner(repo)) || ghurl.CheckURL(raw) != nil {
		return fmt.Errorf("runner URL %q: want %s/%s or %s/%s", raw, server, repo, server, names.Owner(repo))
	}
	if !ghurl.SameServer(raw, server) {
		return fmt.Errorf("runner URL %q: not on the pool's GitHub server %s; the registration token goes to no other server", raw, server)
	}
	return nil
}

// maxRunAttempt bounds a run's attempt number (GitHub allows re-running a run far fewer times).
const maxRunAttempt = 1000

// refuseAssignment reports a malformed assignment without acting on it: REGISTER_FAILED when the
// run id can be named, only the log otherwise (the claim then ends at its deadline).
func (a *Agent) refuseAssignment(ctx context.Context, it *state.Instance, cause error) {
	a.log.Error("refusing a malformed assignment; nothing of it was used", "version", it.Version, "error", cause)
	if names.ValidateAssignmentKey(it.RunID) != nil {
		return
	}
	err := a.store.Signal(ctx, state.Signal{Name: state.SignalRegisterFailed, Run: it.RunID, Version: it.Version, At: a.now(),
		Log: "hangar-agent: malformed assignment: " + cause.Error()})
	if err != nil && !errors.Is(err, state.ErrConflict) {
		a.log.Warn("could not signal REGISTER_FAILED", "error", err)
	}
}

// serve registers a fresh copy of the runner for the item's run, runs it until the run lets the
// instance go, then deregisters and cleans up. It reports whether registration failed.
func (a *Agent) serve(ctx context.Context, item *state.Instance) (failed bool, err error) {
	run, version := item.RunID, item.Version
	log := a.log.With("run", run)
	noticed := a.now()
	woke := time.Unix(0, a.wokeAt.Load()) // the ring that brought the assignment, or the read that found it
	log.Info("assignment noticed", "version", version, "state", item.State,
		"detectionMs", noticed.Sub(item.UpdatedAt).Milliseconds())
	// Nothing of an assignment is used before its acknowledgement is written (here, or by the
	// read that found it: readAssigned): until then release may give the claim back
	// unacknowledged (state.Change.Unacknowledged), counting on this run never being served here.
	switch err := a.ack(ctx, version, noticed); {
	case errors.Is(err, state.ErrConflict):
		log.Info("the assignment moved on before it was acknowledged; not serving it", "version", version, "error", err)
		return false, nil
	case err != nil:
		// Read the item again in a moment and try again while the claim stands; a claim never
		// acknowledged is replaced by provision or given back by release.
		log.Warn("could not acknowledge the assignment; not serving it until the acknowledgement is written", "error", err)
		return false, a.sleep(ctx, wait.Jitter(a.cfg.PollInterval))
	}

	dir := a.runDir(run, item.RunAttempt)
	onHost, err := a.host.OpenRun(dir)
	if err != nil {
		return a.registerFailed(ctx, item, dir, "", err)
	}
	defer onHost.Close()
	names, err := state.ParseRunnerPrefix(item.RunnerPrefix)
	if err != nil {
		return a.registerFailed(ctx, item, dir, "", fmt.Errorf("the assignment's runner name: %w", err))
	}
	name := names.Name(a.cfg.Identity.InstanceID, run)
	labels := runnerLabels(run, a.cfg.Pool.Labels, item.Labels)
	resumed := onHost.Registered(name)
	if !resumed {
		regToken, err := a.handOver(ctx, item, doorbell.KindRegistration)
		switch {
		case ctx.Err() != nil:
			return false, ctx.Err()
		case err != nil:
			return a.registerFailed(ctx, item, dir, "", fmt.Errorf("the registration token: %w", err))
		}
		if err := onHost.Make(a.cfg.RunnerDir); err != nil {
			return a.registerFailed(ctx, item, dir, "", err)
		}
		out := newTail(state.MaxLogTail)
		err = onHost.Configure(ctx, item.RunnerURL, regToken, name, item.RunnerGroup, labels, out)
		if err != nil {
			return a.registerFailed(ctx, item, dir, redact(out.String(), regToken), err)
		}
		log.Info("runner registered", "name", name, "labels", labels, "ms", a.now().Sub(noticed).Milliseconds())
	} else {
		log.Info("runner already registered; resuming it", "name", name)
	}
	// Every start of run.sh (restarts too) runs jobs through the run's guard: a job of another
	// run or repository that names the run's label fails before its first step.
	proc, err := startRunner(onHost, run, item.Repo, "")
	if err != nil {
		return a.registerFailed(ctx, item, dir, "", err)
	}
	registered := state.Signal{Name: state.SignalRegistered, Run: run, Version: version, At: a.now()}
	if !resumed {
		registered.Took = registered.At.Sub(woke) // regMs: when provision first reads a claim (design §6)
	}
	switch err := a.store.Signal(ctx, registered); {
	case err == nil:
		log.Info("signalled", "signal", state.SignalRegistered, "regMs", registered.Took.Milliseconds())
	case errors.Is(err, state.ErrConflict):
		log.Warn("the assignment moved on before REGISTERED could be written", "error", err)
	default:
		log.Warn("could not signal REGISTERED; the run may time out waiting", "error", err)
	}

	restarts := 0
	restartBackoff := wait.Backoff{Initial: time.Second, Max: maxBackoff, Clock: a.Clock}
	stopWatch := a.watchStrays(ctx, onHost, log)
	_, err = a.waitFor(ctx, func(it *state.Instance) bool { return it.RunID != run }, func() {
		select {
		case <-proc.done:
		default:
			return
		}
		restarts++
		log.Warn("runner exited while serving; restarting it", "error", proc.err, "output", proc.out.String(), "restarts", restarts)
		if restartBackoff.Sleep(ctx) != nil {
			return
		}
		if p, err := startRunner(onHost, run, item.Repo, ""); err == nil {
			proc = p
		}
	})
	stopWatch()
	released := time.Unix(0, a.wokeAt.Load()) // the ring that told of the release, or the read that found it
	if stopErr := onHost.Stop(a.cfg.StopTimeout); stopErr != nil {
		log.Warn("stop runner", "error", stopErr)
	}
	if err != nil {
		return false, err // ctx ended or the instance is terminating: nothing to give back
	}
	a.giveBack(ctx, run, dir, released)
	return false, nil
}

// giveBack ends the run on the instance (Host.Scrub, its directories dir with it) and signals
// DEREGISTERED, with how long it took since released (the ring that told of the release, or the
// read that found it; zero: not timed); when anything of the run may have survived, it signals
// FAILED instead, and the instance is not reused. The runner is not removed from GitHub here:
// release deletes the run's runners through the API.
func (a *Agent) giveBack(ctx context.Context, run, dir string, released time.Time) {
	log := a.log.With("run", run)
	start := a.now()
	if err := a.host.Scrub(ctx, dir); err != nil {
		a.cleaningFailed(ctx, run, err)
		return
	}
	log.Info("run cleaned up", "ms", a.now().Sub(start).Milliseconds())
	sig := state.Signal{Name: state.SignalDeregistered, Run: run}
	if !released.IsZero() {
		sig.Took = a.now().Sub(released)
	}
	if err := a.signalLatest(ctx, sig); err != nil {
		log.Warn("could not signal DEREGISTERED; release will terminate this instance when it times out", "error", err)
	}
}

// cleaningFailed signals FAILED with the reason and takes no more work: release and refresh
// terminate an instance whose agent failed, instead of offering it.
func (a *Agent) cleaningFailed(ctx context.Context, run string, cause error) {
	a.draining.Store(true)
	a.log.Error("cleaning up after the run failed; this instance will not serve another run", "run", run, "error", cause)
	msg := "hangar-agent: cleaning up after run " + run + " failed: " + cause.Error()
	if err := a.signalLatest(ctx, state.Signal{Name: state.SignalFailed, Log: msg}); err != nil {
		a.log.Error("could not signal FAILED", "error", err)
	}
}

// registerFailed signals REGISTER_FAILED about the assignment with the log tail, after cleaning
// up what the attempt left, so that the next assignment starts fresh. A failed cleanup signals
// FAILED instead.
func (a *Agent) registerFailed(ctx context.Context, item *state.Instance, dir, out string, cause error) (bool, error) {
	msg := out
	if msg != "" && !strings.HasSuffix(msg, "\n") {
		msg += "\n"
	}
	msg += "hangar-agent: " + cause.Error()
	a.log.Error("runner registration failed", "run", item.RunID, "error", cause, "output", out)
	if err := a.host.Scrub(ctx, dir); err != nil {
		a.cleaningFailed(ctx, item.RunID, err)
		return true, nil
	}
	err := a.store.Signal(ctx, state.Signal{Name: state.SignalRegisterFailed, Run: item.RunID, Version: item.Version, Log: msg, At: a.now()})
	switch {
	case errors.Is(err, state.ErrConflict):
		// The run let the instance go meanwhile (a release, a job's check): whoever gave it back
		// waits for the run's DEREGISTERED, and the run is ended on the instance already.
		if err := a.signalLatest(ctx, state.Signal{Name: state.SignalDeregistered, Run: item.RunID}); err != nil {
			a.log.Warn("could not signal DEREGISTERED for a run given back before it registered", "run", item.RunID, "error", err)
		}
	case err != nil:
		a.log.Warn("could not signal REGISTER_FAILED", "error", err)
	}
	return true, nil
}

// runnerLabels returns the run id, then, for each of the pool's and the assignment's extra
// labels l, the composite <run>-<l>, without repeats. Never a bare label: GitHub gives a job to
// any runner that has all the job's labels, so a bare `linux` would let any job of the repository
// (of the organisation, with org scope) asking `runs-on: [linux]` land on a run's machine.
func runnerLabels(run string, pool, extra []string) []string {
	out := []string{run}
	for _, l := range slices.Concat(pool, extra) {
		if l == "" || l == run {
			continue
		}
		if c := run + "-" + l; !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}
