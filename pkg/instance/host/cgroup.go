package host

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hangar-ci/hangar/pkg/platform/wait"
)

// Every process of a run lives in a cgroup (version 2) of its own, below a persistent "jobs"
// cgroup of the agent's cgroup root: <root>/jobs/<run>-<attempt>. The run's processes start
// there (CLONE_INTO_CGROUP: no moment outside it) and can never leave it, whatever they do to
// their uid (a user namespace maps it anywhere), process group or session. So after a run the
// agent kills the whole jobs subtree with cgroup.kill and waits until the kernel says it holds no
// process (cgroup.events: populated 0), and the metadata firewall matches the jobs cgroup as
// well as the runner user's uid.

// jobsCgroup is the name of the cgroup holding every run's cgroup, below the cgroup root.
const jobsCgroup = "jobs"

// cgroupDrainTimeout bounds how long a killed cgroup may take to empty.
const cgroupDrainTimeout = 15 * time.Second

// cgroupMount is a cgroup2 file system's mount point, from mountinfo.
func cgroupMount(mountinfo io.Reader) (string, error) {
	sc := bufio.NewScanner(mountinfo)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		left, right, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, r := strings.Fields(left), strings.Fields(right)
		if len(f) >= 5 && len(r) >= 1 && r[0] == "cgroup2" {
			return unescapeMountinfo(f[4]), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read mountinfo: %w", err)
	}
	return "", errors.New("no cgroup2 file system is mounted (cgroup v2 is required to contain runs)")
}

// selfCgroupMount is the cgroup2 mount point of this process's mount namespace.
func selfCgroupMount() (string, error) {
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("find the cgroup2 mount: %w", err)
	}
	defer mi.Close()
	return cgroupMount(mi)
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space, …).
func unescapeMountinfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// ownCgroup is the cgroup v2 path of the process, from /proc/<pid>/cgroup's "0::" line.
func ownCgroup(procCgroup io.Reader) (string, error) {
	sc := bufio.NewScanner(procCgroup)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			if !strings.HasPrefix(p, "/") {
				return "", fmt.Errorf("cgroup v2 path %q: want an absolute path", p)
			}
			return p, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read the process's cgroups: %w", err)
	}
	return "", errors.New("the process is in no cgroup v2 hierarchy (no 0:: line)")
}

// defaultCgroupRoot is the agent's own cgroup v2 directory: the cgroup2 mount (from
// /proc/self/mountinfo) joined with the agent's path in it (from /proc/self/cgroup). systemd
// delegates it to the agent (Delegate=yes in its unit).
func defaultCgroupRoot() (string, error) {
	mount, err := selfCgroupMount()
	if err != nil {
		return "", err
	}
	cg, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("find the agent's cgroup: %w", err)
	}
	defer cg.Close()
	own, err := ownCgroup(cg)
	if err != nil {
		return "", err
	}
	return filepath.Join(mount, own), nil
}

// cgroups is the agent's cgroup tree: root (the agent's delegated cgroup) and jobs below it.
type cgroups struct {
	jobs string // absolute directory of the jobs cgroup
	rel  string // the jobs cgroup's path relative to the cgroup2 mount (iptables' --path)
}

// setupCgroups makes the persistent jobs cgroup below root (kept across runs and agent
// restarts: the firewall rule names it) and checks that it can be killed as a whole.
func setupCgroups(root string) (*cgroups, error) {
	if root == "" || !filepath.IsAbs(root) {
		return nil, fmt.Errorf("cgroup root %q: want the absolute directory of a cgroup v2 cgroup", root)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return nil, fmt.Errorf("cgroup root %s: %w", root, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("cgroup root %s is not on a cgroup2 file system: cgroup v2 is required to contain runs", root)
	}
	jobs := filepath.Join(root, jobsCgroup)
	if err := os.Mkdir(jobs, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("make the jobs cgroup %s: %w", jobs, err)
	}
	if _, err := os.Stat(filepath.Join(jobs, "cgroup.kill")); err != nil {
		return nil, fmt.Errorf("the jobs cgroup %s has no cgroup.kill (Linux 5.14 or later is required to kill a run as a whole): %w", jobs, err)
	}
	rel, err := relativeToMount(jobs)
	if err != nil {
		return nil, err
	}
	return &cgroups{jobs: jobs, rel: rel}, nil
}

// relativeToMount returns dir's path inside the cgroup2 file system it lies on.
func relativeToMount(dir string) (string, error) {
	mount, err := selfCgroupMount()
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(mount, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("cgroup %s is not below the cgroup2 mount %s", dir, mount)
	}
	return "/" + strings.TrimPrefix(rel, "."), nil
}

// runCgroup is one run's cgroup, open for CLONE_INTO_CGROUP.
type runCgroup struct {
	dir string
	rel string // its path inside the cgroup2 file system, as /proc/<pid>/cgroup names it
	f   *os.File
}

// newRun makes (or reuses, after an agent restart) the cgroup of a run and opens it.
func (c *cgroups) newRun(name string) (*runCgroup, error) {
	dir := filepath.Join(c.jobs, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("make the run's cgroup %s: %w", dir, err)
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open the run's cgroup %s: %w", dir, err)
	}
	return &runCgroup{dir: dir, rel: c.rel + "/" + name, f: f}, nil
}

// fd is the descriptor to start a process in the cgroup with (SysProcAttr.CgroupFD).
func (r *runCgroup) fd() int { return int(r.f.Fd()) }

func (r *runCgroup) close() {
	if r != nil && r.f != nil {
		_ = r.f.Close()
	}
}

// killAll kills every process of every run (the jobs cgroup and all below it), waits until the
// kernel reports the subtree empty, and removes the runs' cgroups. A subtree that does not empty
// within cgroupDrainTimeout is an error.
func (c *cgroups) killAll(ctx context.Context) error {
	if err := os.WriteFile(filepath.Join(c.jobs, "cgroup.kill"), []byte("1"), 0); err != nil {
		return fmt.Errorf("kill the jobs cgroup %s: %w", c.jobs, err)
	}
	if err := waitUnpopulated(ctx, c.jobs, cgroupDrainTimeout); err != nil {
		return err
	}
	return removeCgroupsBelow(c.jobs)
}

// populated reads cgroup.events: whether any process lives in dir or below it.
func populated(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, fmt.Errorf("read %s: %w", filepath.Join(dir, "cgroup.events"), err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return strings.TrimSpace(v) != "0", nil
		}
	}
	return false, fmt.Errorf("%s: no populated line", filepath.Join(dir, "cgroup.events"))
}

// waitUnpopulated waits until no process lives in dir or below it.
func waitUnpopulated(ctx context.Context, dir string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	backoff := wait.Backoff{Initial: 5 * time.Millisecond, Max: 100 * time.Millisecond}
	for {
		busy, err := populated(dir)
		if err != nil {
			return err
		}
		if !busy {
			return nil
		}
		if err := backoff.Sleep(ctx); err != nil {
			procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			return fmt.Errorf("cgroup %s still holds processes %d s after it was killed (%s): %w",
				dir, int(timeout.Seconds()), strings.Join(strings.Fields(string(procs)), " "), err)
		}
	}
}

// removeCgroupsBelow removes every cgroup below dir, deepest first (a cgroup can only be removed
// once empty of processes and children).
func removeCgroupsBelow(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list the cgroups below %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		child := filepath.Join(dir, e.Name())
		if err := removeCgroupsBelow(child); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.Remove(child); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", child, err))
		}
	}
	return errors.Join(errs...)
}

// leftInJobs describes the processes still in the jobs cgroup or below it ("" when none).
func (c *cgroups) leftInJobs() (string, error) {
	busy, err := populated(c.jobs)
	if err != nil || !busy {
		return "", err
	}
	var pids []string
	_ = filepath.WalkDir(c.jobs, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			pids = append(pids, strings.Fields(string(b))...)
		}
		return nil
	})
	slices.Sort(pids)
	return fmt.Sprintf("processes %s in %s", strings.Join(pids, " "), c.jobs), nil
}
