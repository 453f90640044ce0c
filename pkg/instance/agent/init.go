package agent

import (
	"context"
	"fmt"
	"strings"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// init readies the instance: the runner user must exist, be unprivileged and have no
// subordinate ids (unless the pool allows user namespaces); the jobs cgroup that contains every
// run is made; the firewall rules keeping the jobs cgroup and the runner user off the metadata
// endpoint are installed and proved (on every start: rules do not survive a reboot); at and cron
// are denied to the runner user; the directories outside its home it may write to are found
// (see findSweepDirs); then, once per spec (a root-owned marker), the pre-runner script
// and the runner install. READY follows; a failure is signalled as FAILED with the log tail.
func (a *Agent) init(ctx context.Context) error {
	p := a.cfg.Pool
	var err error
	if err := checkHelper(a.cfg.Helper); err != nil {
		return a.failInit(ctx, err, "")
	}
	if a.user, err = lookupRunnerUser(a.cfg.RunAs, p.Runner.Sudo); err != nil {
		return a.failInit(ctx, err, "")
	}
	if a.user.subUIDs, err = checkSubordinateIDs(a.user, p.Runner.UserNamespaces); err != nil {
		return a.failInit(ctx, err, "")
	}
	if p.Runner.UserNamespaces {
		a.log.Warn("the pool lets the runner make user namespaces (runner.userNamespaces): jobs reach the kernel's namespaced interfaces",
			"subordinateUIDs", rangesString(a.user.subUIDs))
	}
	root := a.cfg.CgroupRoot
	if root == "" {
		if root, err = DefaultCgroupRoot(); err != nil {
			return a.failInit(ctx, fmt.Errorf("find the agent's cgroup, to contain runs: %w", err), "")
		}
	}
	if a.cgroups, err = setupCgroups(root); err != nil {
		return a.failInit(ctx, fmt.Errorf("contain runs in cgroups: %w", err), "")
	}
	a.log.Info("runs are contained in cgroups", "jobs", a.cgroups.jobs)
	if p.Runner.MetadataAccess {
		a.log.Warn("the pool lets the runner user reach instance metadata (runner.metadataAccess): jobs can use the instance role")
	} else if out, err := blockMetadata(ctx, a.cfg.Iptables, a.cfg.Helper, a.cfg.MetadataEndpoint, a.user, a.cgroups); err != nil {
		return a.failInit(ctx, err, out)
	} else {
		a.log.Info("metadata endpoint closed to the runs", "detail", out)
		if err := blockMetadataIPv6(ctx, a.cfg.Iptables, a.cfg.MetadataEndpoint, a.user, a.cgroups); err != nil {
			a.log.Warn("could not close the IPv6 metadata endpoint to the runs (keep it off in the launch template)", "error", err)
		}
	}
	if err := denyScheduling(a.user.name); err != nil {
		return a.failInit(ctx, err, "")
	}
	if err := a.findSweepDirs("/"); err != nil {
		return a.failInit(ctx, fmt.Errorf("find the directories the runner user may write to: %w", err), "")
	}
	if err := a.scrubAtStart(ctx); err != nil {
		return a.failInit(ctx, fmt.Errorf("clean up after an earlier agent: %w", err), "")
	}
	if done, err := a.initDone(); err != nil {
		return a.failInit(ctx, err, "")
	} else if done && runnerInstalled(a.cfg.RunnerDir) {
		a.log.Info("initialised before for this spec; straight to the reuse loop", "spec", p.SpecHash)
	} else {
		if err := a.initOnce(ctx); err != nil {
			return err
		}
	}
	if err := a.signalLatest(ctx, state.Signal{Name: state.SignalReady}); err != nil {
		a.log.Warn("could not signal READY; serving anyway", "error", err)
	}
	return nil
}

// initOnce runs the pre-runner script and installs the runner, then records that this spec is
// done, so that a restarted agent or an instance started from stopped does not do it again.
func (a *Agent) initOnce(ctx context.Context) error {
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
	if err := hardenInstall(a.cfg.RunnerDir); err != nil {
		return a.failInit(ctx, fmt.Errorf("make the runner install root's and read-only: %w", err), installLog)
	}
	a.log.Info("runner ready", "detail", installLog)
	if err := a.markInitDone(); err != nil {
		return a.failInit(ctx, err, "")
	}
	return nil
}

func (a *Agent) failInit(ctx context.Context, cause error, logTail string) error {
	msg := logTail
	if msg != "" && !strings.HasSuffix(msg, "\n") {
		msg += "\n"
	}
	msg += "hangar-agent: " + cause.Error()
	if err := a.signalLatest(ctx, state.Signal{Name: state.SignalFailed, Log: msg}); err != nil {
		a.log.Error("could not signal FAILED", "error", err)
	}
	return cause
}
