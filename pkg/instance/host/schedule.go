package host

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hangar-ci/hangar/pkg/instance/runas"
)

// What a run could schedule to outlive it: at jobs and a crontab fire during a later run, and
// keys in the user's kernel keyrings (which the kernel keeps while no process of the user runs)
// are read by it. Init denies at and cron to the runner user; after each run its at jobs and
// crontab are removed and its keyrings cleared, and then checked.

// etcDir holds at's and cron's allow and deny lists (a variable for tests).
var etcDir = "/etc"

// denyScheduling lists the user in /etc/at.deny and /etc/cron.deny (made when missing) and takes
// it out of /etc/at.allow and /etc/cron.allow where those exist (an allow list wins over the
// deny list).
func denyScheduling(name string) error {
	var errs []error
	for _, tool := range []string{"at", "cron"} {
		if err := editUserList(filepath.Join(etcDir, tool+".deny"), name, true); err != nil {
			errs = append(errs, err)
		}
		if err := editUserList(filepath.Join(etcDir, tool+".allow"), name, false); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("deny at and cron to %s: %w", name, err)
	}
	return nil
}

// editUserList adds name to (listed) or removes it from a one-user-a-line file. A missing file
// is made only to add; its mode and owner are kept otherwise.
func editUserList(path, name string, listed bool) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if !listed {
			return nil
		}
		return os.WriteFile(path, []byte(name+"\n"), 0o644)
	}
	if err != nil {
		return err
	}
	var lines []string
	found := false
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == name {
			found = true
			if !listed {
				continue
			}
		}
		lines = append(lines, sc.Text())
	}
	if found == listed {
		return nil
	}
	if listed {
		lines = append(lines, name)
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp := path + ".hangar"
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), st.Mode().Perm()); err != nil {
		return err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		if err := os.Chown(tmp, int(sys.Uid), int(sys.Gid)); err != nil {
			return err
		}
	}
	return os.Rename(tmp, path)
}

// scheduleTimeout bounds each at, cron and keyring command.
const scheduleTimeout = 30 * time.Second

// atJobs lists the ids of the user's at jobs (atq, its path, as root lists everyone's:
// "id<TAB>date queue user"); none when at is not installed (atq "").
func atJobs(ctx context.Context, atq, name string) ([]string, error) {
	if atq == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, scheduleTimeout)
	defer cancel()
	out, err := rootCommand(ctx, atq).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("atq: %w: %s", err, strings.TrimSpace(string(out)))
	}
	var ids []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[len(f)-1] == name {
			ids = append(ids, f[0])
		}
	}
	return ids, nil
}

// removeAtJobs removes every at job of the user.
func removeAtJobs(ctx context.Context, t tools, name string) error {
	ids, err := atJobs(ctx, t.atq, name)
	if err != nil || len(ids) == 0 {
		return err
	}
	if t.atrm == "" {
		return fmt.Errorf("at jobs %s of %s: atrm is not on %s", strings.Join(ids, " "), name, rootPath)
	}
	ctx, cancel := context.WithTimeout(ctx, scheduleTimeout)
	defer cancel()
	if out, err := rootCommand(ctx, t.atrm, ids...).CombinedOutput(); err != nil {
		return fmt.Errorf("atrm %s: %w: %s", strings.Join(ids, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// cronSpools are where cron keeps users' crontabs, one file per user: Debian's and Ubuntu's,
// then Amazon Linux's (a variable for tests). The files are used directly: the crontab command
// refuses to work on the crontab of a user cron is denied to, even for root.
var cronSpools = []string{"/var/spool/cron/crontabs", "/var/spool/cron"}

// crontabs lists the user's crontab files.
func crontabs(name string) ([]string, error) {
	var out []string
	for _, d := range cronSpools {
		p := filepath.Join(d, name)
		st, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("look for the crontab of %s: %w", name, err)
		}
		if !st.IsDir() {
			out = append(out, p)
		}
	}
	return out, nil
}

// removeCrontab removes the user's crontab.
func removeCrontab(name string) error {
	files, err := crontabs(name)
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove the crontab of %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// clearKeyrings runs the helper's ClearKeyringsCommand as the runner user.
func (h *Host) clearKeyrings(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, scheduleTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.cfg.Helper, runas.ClearKeyringsCommand)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: h.user.credential()}
	cmd.Env = h.user.env()
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("clear the kernel keyrings of %s: %w: %s", h.user.name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// checkNothingLeft is the last step after a run: no process of the runner user (or its
// subordinate uids), nothing in the jobs cgroup, no at job, no crontab. Anything found is an
// error naming it.
func (h *Host) checkNothingLeft(ctx context.Context) error {
	var left []string
	if s, err := h.cgroups.leftInJobs(); err != nil {
		return err
	} else if s != "" {
		left = append(left, s)
	}
	pids, err := userProcesses(h.user.owns)
	if err != nil {
		return err
	}
	if len(pids) > 0 {
		slices.Sort(pids)
		left = append(left, fmt.Sprintf("processes %v of the runner user", pids))
	}
	ids, err := atJobs(ctx, h.tools.atq, h.user.name)
	if err != nil {
		return err
	}
	if len(ids) > 0 {
		left = append(left, "at jobs "+strings.Join(ids, " "))
	}
	if files, err := crontabs(h.user.name); err != nil {
		return err
	} else if len(files) > 0 {
		left = append(left, "a crontab ("+strings.Join(files, ", ")+")")
	}
	if len(left) > 0 {
		return fmt.Errorf("the run left %s", strings.Join(left, "; "))
	}
	return nil
}
