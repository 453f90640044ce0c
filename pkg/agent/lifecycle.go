package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/pkg/state"
	"github.com/hangar-ci/hangar/pkg/wait"
)

// init runs once: the pre-runner script, then the runner install, then READY. A failure is
// signalled as FAILED with the log tail.
func (a *Agent) init(ctx context.Context) error {
	p := a.cfg.Pool
	preLog, err := runPreRunner(ctx, p.Runner.PreRunnerScript, a.cfg.PreRunnerTimeout, []string{
		"HANGAR_POOL=" + p.Name, "HANGAR_INSTANCE_ID=" + a.cfg.Identity.InstanceID,
	})
	if err != nil {
		return a.failInit(ctx, err, preLog)
	}
	installLog, err := installRunner(ctx, a.http, p.Runner, a.cfg.Identity.Arch, a.cfg.RunnerDir)
	if err != nil {
		return a.failInit(ctx, err, preLog)
	}
	a.log.Info("runner ready", "detail", installLog)
	if a.runner, err = newScriptRunner(a.cfg.RunnerDir, a.cfg.WorkDir, a.cfg.RunAs, a.cfg.StopTimeout); err != nil {
		return a.failInit(ctx, err, preLog)
	}
	if err := a.signalLatest(ctx, state.SignalReady, "", ""); err != nil {
		a.log.Warn("could not signal READY; serving anyway", "error", err)
	}
	return nil
}

func (a *Agent) failInit(ctx context.Context, cause error, logTail string) error {
	msg := logTail
	if msg != "" && !strings.HasSuffix(msg, "\n") {
		msg += "\n"
	}
	msg += "hangar-agent: " + cause.Error()
	if err := a.signalLatest(ctx, state.SignalFailed, "", msg); err != nil {
		a.log.Error("could not signal FAILED", "error", err)
	}
	return cause
}

// assigned reports whether the item hands the instance a run to serve.
func assigned(it *state.Instance) bool {
	switch it.State {
	case state.Created, state.Claimed, state.Running:
		return it.RunID != "" && it.RunnerURL != ""
	}
	return false
}

// loop is the reuse loop: wait for a run, serve it, give it back, again.
func (a *Agent) loop(ctx context.Context) error {
	var failedVersion int64 // the assignment whose registration failed: not tried twice
	for {
		item, err := a.waitFor(ctx, func(it *state.Instance) bool {
			return !a.draining.Load() && assigned(it) && it.Version != failedVersion
		}, nil)
		if err != nil {
			a.log.Info("agent stopping", "reason", err)
			return err
		}
		if failed, err := a.serve(ctx, item); err != nil {
			return err
		} else if failed {
			failedVersion = item.Version
		}
	}
}

// serve registers the runner for the item's run, runs it until the run lets the instance go,
// then deregisters and wipes. It reports whether registration failed.
func (a *Agent) serve(ctx context.Context, item *state.Instance) (failed bool, err error) {
	run, version := item.RunID, item.Version
	log := a.log.With("run", run)
	noticed := a.now()
	log.Info("assignment noticed", "version", version, "state", item.State,
		"detectionMs", noticed.Sub(item.UpdatedAt).Milliseconds())

	name := state.RunnerName(a.cfg.Identity.InstanceID, run)
	labels := runnerLabels(run, a.cfg.Pool.Labels, item.Labels)
	if !a.configuredFor(name) {
		if err := a.runner.forget(); err != nil { // a registration for another run never serves this one
			log.Warn("forget a stale registration", "error", err)
		}
		if item.RegToken == "" {
			return a.registerFailed(ctx, item, "", errors.New("the item carries no registration token"))
		}
		out, err := a.runner.configure(ctx, item.RunnerURL, item.RegToken, name, labels)
		if err != nil {
			return a.registerFailed(ctx, item, out, err)
		}
		log.Info("runner registered", "name", name, "labels", labels, "ms", a.now().Sub(noticed).Milliseconds())
	} else {
		log.Info("runner already registered; resuming it", "name", name)
	}
	proc, err := a.runner.start()
	if err != nil {
		return a.registerFailed(ctx, item, "", err)
	}
	switch err := a.store.Signal(ctx, state.Signal{Name: state.SignalRegistered, Run: run, Version: version, At: a.now()}); {
	case err == nil:
		log.Info("signalled", "signal", state.SignalRegistered)
	case errors.Is(err, state.ErrConflict):
		log.Warn("the assignment moved on before REGISTERED could be written", "error", err)
	default:
		log.Warn("could not signal REGISTERED; the run may time out waiting", "error", err)
	}

	restarts := 0
	released, err := a.waitFor(ctx, func(it *state.Instance) bool { return it.RunID != run }, func() {
		select {
		case <-proc.done:
		default:
			return
		}
		restarts++
		log.Warn("runner exited while serving; restarting it", "error", proc.err, "output", proc.out.String(), "restarts", restarts)
		if wait.Sleep(ctx, wait.Jitter(min(time.Duration(restarts)*time.Second, maxBackoff))) != nil {
			return
		}
		if p, err := a.runner.start(); err == nil {
			proc = p
		}
	})
	if stopErr := proc.stop(a.cfg.StopTimeout); stopErr != nil {
		log.Warn("stop runner", "error", stopErr)
	}
	if err != nil {
		return false, err // ctx ended or the instance is terminating: nothing to give back
	}
	a.giveBack(ctx, released, run)
	return false, nil
}

// giveBack deregisters the runner, wipes the work directories and signals DEREGISTERED.
func (a *Agent) giveBack(ctx context.Context, item *state.Instance, run string) {
	log := a.log.With("run", run)
	if item.RemoveToken != "" {
		if out, err := a.runner.remove(ctx, item.RemoveToken); err != nil {
			log.Warn("remove runner from GitHub failed; release removes it by API", "error", err, "output", out)
		} else {
			log.Info("runner removed from GitHub")
		}
	} else {
		log.Info("no remove token on the item; release removes the runner by API")
	}
	if err := a.runner.forget(); err != nil {
		log.Warn("forget local registration", "error", err)
	}
	for _, d := range append([]string{a.cfg.WorkDir}, a.cfg.WipeDirs...) {
		if err := wipe(d); err != nil {
			log.Warn("wipe", "dir", d, "error", err)
		}
	}
	if err := a.signalLatest(ctx, state.SignalDeregistered, run, ""); err != nil {
		log.Warn("could not signal DEREGISTERED; release will terminate this instance when it times out", "error", err)
	}
}

// registerFailed signals REGISTER_FAILED about the assignment with the log tail, and cleans up so
// that the next assignment starts fresh.
func (a *Agent) registerFailed(ctx context.Context, item *state.Instance, out string, cause error) (bool, error) {
	msg := out
	if msg != "" && !strings.HasSuffix(msg, "\n") {
		msg += "\n"
	}
	msg += "hangar-agent: " + cause.Error()
	a.log.Error("runner registration failed", "run", item.RunID, "error", cause, "output", out)
	_ = a.runner.forget()
	_ = wipe(a.cfg.WorkDir)
	err := a.store.Signal(ctx, state.Signal{Name: state.SignalRegisterFailed, Run: item.RunID, Version: item.Version, Log: msg, At: a.now()})
	if err != nil && !errors.Is(err, state.ErrConflict) {
		a.log.Warn("could not signal REGISTER_FAILED", "error", err)
	}
	return true, nil
}

// configuredFor reports whether the runner holds a registration under name (after an agent
// restart mid-run). The real runner records the name as agentName in .runner; the stand-in as
// name.
func (a *Agent) configuredFor(name string) bool {
	b, err := os.ReadFile(filepath.Join(a.cfg.RunnerDir, ".runner"))
	if err != nil {
		return false
	}
	var settings struct {
		AgentName string `json:"agentName"`
		Name      string `json:"name"`
	}
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) // the real runner writes a byte-order mark
	if json.Unmarshal(b, &settings) != nil {
		return false
	}
	return settings.AgentName == name || settings.Name == name
}

// runnerLabels returns the run id, then the pool's and the assignment's extra labels, without
// repeats.
func runnerLabels(run string, pool, extra []string) []string {
	out := []string{run}
	for _, l := range slices.Concat(pool, extra) {
		if l != "" && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// String describes the agent's configuration for its start-up log line.
func (c Config) String() string {
	return fmt.Sprintf("runner dir %s, work dir %s, run as %q, poll %s, heartbeat %s", c.RunnerDir, c.WorkDir, c.RunAs, c.PollInterval, c.HeartbeatInterval)
}
