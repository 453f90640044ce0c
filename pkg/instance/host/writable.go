package host

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Directories outside its home that the runner user may write to are where a run can leave
// something for the next: the shared temporary directories (Config.TmpDirs), those the pool lists
// (runner.writableDirs) and any others the image happens to give it. At start the agent walks the
// local file systems, as far as the runner user can reach, for the last kind: each one found is
// logged and swept after every run like the others. Sweeping rather than refusing to serve: such
// a directory holds nothing a run could not have changed, so nothing in it can be trusted by the
// next run anyway (an image whose content there must survive has to make it root's); the agent
// refuses to serve only when a directory its own directories lie under is writable to the runner
// user (a run could move them), or the walk cannot finish.

// scanSkip are trees the walk never enters: the kernel's and the runtime's.
var scanSkip = []string{"/proc", "/sys", "/dev", "/run"}

// maxScanDirs bounds the walk: past that many directories it gives up, and the agent does not
// serve (it could not know where a run may write).
const maxScanDirs = 500_000

// nonLocalFS are the file system types whose mounts the walk leaves alone: network and
// pseudo file systems.
var nonLocalFS = map[string]bool{
	"nfs": true, "nfs4": true, "cifs": true, "smb3": true, "smbfs": true, "sshfs": true, "9p": true, "afs": true,
	"proc": true, "sysfs": true, "devtmpfs": true, "devpts": true, "cgroup": true, "cgroup2": true, "autofs": true,
	"debugfs": true, "tracefs": true, "securityfs": true, "pstore": true, "bpf": true, "binfmt_misc": true,
	"mqueue": true, "hugetlbfs": true, "configfs": true, "fusectl": true, "efivarfs": true,
}

// mountsFile lists the mounts (a variable for tests).
var mountsFile = "/proc/self/mounts"

// nonLocalMounts returns the mount points of non-local file systems.
func nonLocalMounts() []string {
	f, err := os.Open(mountsFile)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue
		}
		if typ := fields[2]; nonLocalFS[typ] || strings.HasPrefix(typ, "fuse") {
			out = append(out, strings.ReplaceAll(fields[1], `\040`, " "))
		}
	}
	return out
}

// under reports whether p is dir or lies below it.
func under(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// may reports whether u may use st as the permission bits bit (4 read, 2 write, 1 search) allow
// its owner, group or others (access control lists are not read).
func (u *runnerUser) may(st *syscall.Stat_t, bit uint32) bool {
	mode := st.Mode
	switch {
	case u.owns(int(st.Uid)):
		return mode&(bit<<6) != 0
	case int(st.Gid) == u.gid || slices.Contains(u.groups, st.Gid):
		return mode&(bit<<3) != 0
	}
	return mode&bit != 0
}

// findWritable walks root as far as u can search and returns the directories u owns or may
// create entries in, outside the trees in skip. A directory u owns inside one already found is
// not listed again: sweeping the outer one removes it whole.
func findWritable(root string, u *runnerUser, skip []string) ([]string, error) {
	var found []string
	seen := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if slices.ContainsFunc(skip, func(s string) bool { return under(p, s) }) {
			return fs.SkipDir
		}
		if seen++; seen > maxScanDirs {
			return fmt.Errorf("more than %d directories", maxScanDirs)
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fs.SkipDir
		}
		if !u.may(st, 1) {
			return fs.SkipDir // u cannot reach anything below
		}
		if !u.may(st, 2) {
			return nil
		}
		if u.owns(int(st.Uid)) && slices.ContainsFunc(found, func(f string) bool { return under(p, f) }) {
			return fs.SkipDir
		}
		found = append(found, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk %s for directories %s may write to: %w", root, u.name, err)
	}
	return found, nil
}

// findSweepDirs settles the directories swept after every run besides the temporary ones: the
// pool's runner.writableDirs, then those the walk finds (logged). It refuses a listed directory
// that holds or lies in the agent's own directories or the user's home, and a writable directory
// the agent's own directories lie under.
func (h *Host) findSweepDirs(root string) error {
	own := h.cfg.OwnDirs
	for _, d := range h.cfg.Runner.WritableDirs {
		for _, o := range append(slices.Clone(own), h.user.home) {
			if o != "" && (under(d, o) || under(o, d)) {
				return fmt.Errorf("runner.writableDirs %q: it holds or lies in %s, which the agent manages itself", d, o)
			}
		}
	}
	skip := slices.Concat(scanSkip, nonLocalMounts(), own, h.cfg.TmpDirs, h.cfg.Runner.WritableDirs)
	if h.user.home != "" {
		skip = append(skip, h.user.home)
	}
	found, err := findWritable(root, h.user, skip)
	if err != nil {
		return err
	}
	for _, d := range found {
		for _, o := range own {
			if under(o, d) {
				return fmt.Errorf("%s may write to %s, which holds the agent's %s: a run could move it; fix the image", h.user.name, d, o)
			}
		}
	}
	if len(found) > 0 {
		h.log.Warn("the runner user may write to directories outside its home, the temporary directories and runner.writableDirs; they are swept after every run like /tmp",
			"user", h.user.name, "dirs", found)
	}
	h.sweepDirs = slices.Concat(h.cfg.Runner.WritableDirs, found)
	return nil
}

// sweepWritable removes the runner user's entries in the writable directories findSweepDirs
// settled, as Scrub does in the temporary ones.
func (h *Host) sweepWritable() error {
	var errs []error
	for _, d := range h.sweepDirs {
		errs = append(errs, removeOwned(d, h.user.owns))
	}
	return errors.Join(errs...)
}
