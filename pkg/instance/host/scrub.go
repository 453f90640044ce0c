package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Scrub makes sure nothing of the runs the runner user served survives into the next one, and
// removes trees (the runs' directories) besides: kill, then clear, then check.
//
//  1. kill: every process of every run is killed as a whole (cgroup.kill of the jobs cgroup,
//     waiting until the kernel reports it empty), wherever a user namespace mapped its uid; then,
//     a second pass, every process of the runner user (and its subordinate uids), however it
//     left its process group;
//  2. clear: what outlives processes is removed: the user's System V IPC objects, at jobs,
//     crontab, systemd lingering, logind's sessions and runtime directory, crash handlers' cores
//     and reports, per-user journals and kernel keyrings; Docker's containers, volumes, networks and
//     images, when Docker is here; the trees (registration files included), the user's home
//     (made anew from the skeleton) and the user's files in the shared temporary directories and
//     the other directories it may write to (see findSweepDirs), never following a symlink;
//  3. check: no entry of the user left outside its home and the swept directories (of the
//     directories that changed: checkNoFilesLeft), no process in the jobs cgroup or of the user,
//     no at job, no crontab.
//
// Any failure is returned: the instance must not serve again.
func (h *Host) Scrub(ctx context.Context, trees ...string) error {
	if err := h.ready(); err != nil {
		return err
	}
	u := h.user
	if err := h.cgroups.killAll(ctx); err != nil {
		return fmt.Errorf("end the runs' processes: %w", err)
	}
	if err := killUser(ctx, u.owns); err != nil {
		return fmt.Errorf("end the runner user's processes: %w", err)
	}
	if err := removeLeftovers(ctx, u, h.tools); err != nil {
		return fmt.Errorf("remove what outlives the run's processes: %w", err)
	}
	found, err := endSessions(ctx, h.tools.loginctl, u)
	for _, f := range found {
		h.log.Warn("the runner user had what only a login gives; removed", "found", f)
	}
	if err != nil {
		return fmt.Errorf("end the runner user's sessions: %w", err)
	}
	crashes, err := removeCrashes(u.owns)
	if len(crashes) > 0 {
		h.log.Warn("a crash handler kept cores or reports of the run's processes; removed", "files", crashes)
	}
	if err != nil {
		return err
	}
	if _, err := removeUserJournals(ctx, h.tools.journalctl, u.uid); err != nil {
		return err
	}
	if err := h.clearKeyrings(ctx); err != nil {
		return err
	}
	if err := cleanDocker(ctx, h.tools.docker, h.log); err != nil {
		return fmt.Errorf("remove what the run left in Docker: %w", err)
	}
	var errs []error
	for _, t := range trees {
		errs = append(errs, removeTree(t))
	}
	errs = append(errs, u.resetHome())
	for _, d := range h.cfg.TmpDirs {
		errs = append(errs, removeOwned(d, u.owns))
	}
	errs = append(errs, h.sweepWritable())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove the run's files: %w", err)
	}
	if escapes := h.takeEscapes(); len(escapes) > 0 {
		return fmt.Errorf("processes of the runner user escaped the run's cgroup during the run (killed): %s", strings.Join(escapes, "; "))
	}
	if err := h.kernelHeld(); err != nil {
		return err
	}
	if err := h.checkNoFilesLeft(); err != nil {
		return fmt.Errorf("check after cleaning up: %w", err)
	}
	if err := h.checkNothingLeft(ctx); err != nil {
		return fmt.Errorf("check after cleaning up: %w", err)
	}
	return nil
}
