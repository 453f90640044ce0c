package host

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
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

// stamp is what says a directory changed: its modification and change times (an entry made,
// removed or renamed in it changes the first; its owner or mode, the second).
type stamp struct{ mtime, ctime syscall.Timespec }

func stampOf(st *syscall.Stat_t) stamp { return stamp{st.Mtim, st.Ctim} }

// scan is what a walk of the local file systems found, as far as the runner user can search.
type scan struct {
	// writable are the directories u owns or may create entries in. A directory u owns inside
	// one already found is not listed again: sweeping the outer one removes it whole.
	writable []string
	// files are the other entries (not directories, not symlinks) u owns or may write: a run could
	// leave something in them for the next, and no sweep can reset another's file.
	files []string
	// dirs are every directory walked, with its stamp: the post-run check reads again only
	// those that changed (checkNoFilesLeft).
	dirs map[string]stamp
}

// maxListed bounds the files a refusal names.
const maxListed = 10

// findWritable walks root as far as u can search, outside the trees in skip, for what u may
// write to (scan).
func findWritable(root string, u *runnerUser, skip []string) (*scan, error) {
	out := &scan{dirs: map[string]stamp{}}
	seen := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil // a link is no place to write: its target is walked where it lies
		}
		if slices.ContainsFunc(skip, func(s string) bool { return under(p, s) }) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
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
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !d.IsDir() {
			// A regular file or a device node holds what is written to it; a socket or a pipe
			// passes it on to its reader, and keeps nothing for the next run.
			if t := d.Type(); (t.IsRegular() || t&fs.ModeDevice != 0) && (u.owns(int(st.Uid)) || u.may(st, 2)) {
				out.files = append(out.files, p)
			}
			return nil
		}
		if seen++; seen > maxScanDirs {
			return fmt.Errorf("more than %d directories", maxScanDirs)
		}
		if !u.may(st, 1) {
			return fs.SkipDir // u cannot reach anything below
		}
		out.dirs[p] = stampOf(st)
		if !u.may(st, 2) && !u.owns(int(st.Uid)) { // one it owns it may make writable
			return nil
		}
		if u.owns(int(st.Uid)) && slices.ContainsFunc(out.writable, func(f string) bool { return under(p, f) }) {
			return fs.SkipDir
		}
		out.writable = append(out.writable, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk %s for what %s may write to: %w", root, u.name, err)
	}
	return out, nil
}

// inside reports whether p lies in one of the directories in dirs.
func inside(p string, dirs []string) bool {
	return slices.ContainsFunc(dirs, func(d string) bool { return under(p, d) })
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
	if err := removeMailSpool(h.user, h.log); err != nil {
		return err
	}
	sc, err := findWritable(root, h.user, skip)
	if err != nil {
		return err
	}
	// Files in a directory swept after every run go with the sweep (the runner user's), or could
	// be replaced by the run anyway; others it may write, or owns, outside them are refused.
	files := slices.DeleteFunc(sc.files, func(f string) bool { return inside(f, sc.writable) })
	if len(files) > 0 {
		return fmt.Errorf("%s owns or may write to %d files outside its home and the directories swept after every run (%s): a run could leave something in them for the next; make them root's and not writable by others, or list their directories in runner.writableDirs",
			h.user.name, len(files), strings.Join(files[:min(len(files), maxListed)], ", "))
	}
	found := sc.writable
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
	h.walkSkip, h.dirs = skip, sc.dirs
	return nil
}

// checkNoFilesLeft finds, after a run's sweeps, any entry of the runner user (or its subordinate
// uids) left on the local file systems outside its home and the swept directories: a run makes
// entries only where it may write, which the sweeps empty of its own, so one found elsewhere
// came by a way not closed (a directory made writable meanwhile, a privileged service writing
// for it). It reads again only the directories whose stamp changed since the walk (or the last
// check), and walks whole those made since; an entry given to the user in a directory that
// did not change otherwise (a privileged chown) is not seen.
func (h *Host) checkNoFilesLeft() error {
	var left []string
	for dir, was := range h.dirs {
		var st syscall.Stat_t
		if err := syscall.Lstat(dir, &st); err != nil {
			delete(h.dirs, dir)
			continue
		}
		if stampOf(&st) == was {
			continue
		}
		h.dirs[dir] = stampOf(&st)
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue // no longer readable: nothing the user reaches either
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if inside(p, h.walkSkip) || inside(p, h.sweepDirs) {
				continue
			}
			if _, known := h.dirs[p]; known {
				continue // read on its own when its stamp changed
			}
			sc, err := findWritable(p, h.user, h.walkSkip)
			if err != nil {
				return err
			}
			maps.Copy(h.dirs, sc.dirs)
			// What turned writable since the walk (a service made it so) is no sweep's: the next
			// run could find what this one left there.
			owned, err := ownedIn(p, h.user)
			if err != nil {
				return fmt.Errorf("look for the runner user's files in %s: %w", p, err)
			}
			left = append(left, owned...)
			for _, w := range slices.Concat(sc.writable, sc.files) {
				if !slices.Contains(owned, w) {
					left = append(left, w+" (writable by the runner user)")
				}
			}
		}
	}
	if len(left) > 0 {
		slices.Sort(left)
		return fmt.Errorf("the run left %d files of the runner user outside its home and the swept directories: %s",
			len(left), strings.Join(left[:min(len(left), maxListed)], ", "))
	}
	return nil
}

// ownedIn returns p and what lies below it that u owns (without following links); what vanishes
// meanwhile is skipped.
func ownedIn(p string, u *runnerUser) ([]string, error) {
	var out []string
	err := filepath.WalkDir(p, func(q string, _ fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if syscall.Lstat(q, &st) == nil && u.owns(int(st.Uid)) {
			out = append(out, q)
		}
		return nil
	})
	return out, err
}

// mailSpools hold users' mailboxes, which useradd may make for the runner user (Amazon Linux's
// does): the user's own file, which a run could leave something in for the next (a variable for
// tests).
var mailSpools = []string{"/var/mail", "/var/spool/mail"}

// removeMailSpool removes the runner user's mailbox, if it has one: nothing on an instance
// delivers mail to it.
func removeMailSpool(u *runnerUser, log *slog.Logger) error {
	for _, d := range mailSpools {
		p := filepath.Join(d, u.name)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil || !u.owns(int(st.Uid)) {
			continue
		}
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("remove the runner user's mailbox %s: %w", p, err)
		}
		log.Info("removed the runner user's mailbox: a run could leave something in it for the next", "path", p)
	}
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
