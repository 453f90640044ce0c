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
	"runtime/debug"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
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

// mayMode reports whether u may use a file of owner uid, group gid and mode as the permission
// bits bit (4 read, 2 write, 1 search) allow its owner, group or others (access control lists
// are not read).
func (u *runnerUser) mayMode(uid, gid, mode, bit uint32) bool {
	switch {
	case u.owns(int(uid)):
		return mode&(bit<<6) != 0
	case int(gid) == u.gid || slices.Contains(u.groups, gid):
		return mode&(bit<<3) != 0
	}
	return mode&bit != 0
}

// stamp is what says a directory changed: its modification and change times (an entry made,
// removed or renamed in it changes the first; its owner or mode, the second), folded into one
// word, since an instance's tens of thousands of them stay in the agent's memory.
type stamp uint64

func stampOf(st *syscall.Stat_t) stamp {
	return foldTimes(st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
}

func stampOfUnix(st *unix.Stat_t) stamp {
	return foldTimes(st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
}

func foldTimes(ms, mns, cs, cns int64) stamp {
	h := uint64(ms)*1_000_000_007 ^ uint64(mns)
	h = h*0x9E3779B97F4A7C15 ^ uint64(cs)*1_000_000_009 ^ uint64(cns)<<1
	return stamp(h)
}

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
// write to (scan). It reads each directory once and stats its entries relative to it (fstatat):
// the walk runs at every start of the agent over the whole file system, and on a fleet of
// simulated instances sharing one machine.
func findWritable(root string, u *runnerUser, skip []string) (*scan, error) {
	w := &walker{u: u, skip: skip, out: &scan{dirs: map[string]stamp{}}, buf: make([]byte, direntBuf)}
	var st unix.Stat_t
	err := unix.Lstat(root, &st)
	switch {
	case errors.Is(err, unix.ENOENT):
		return w.out, nil
	case err != nil:
		return nil, fmt.Errorf("walk %s for what %s may write to: %w", root, u.name, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if !inside(root, skip) {
			err = w.dir(root, &st)
		}
	} else {
		w.file(filepath.Dir(root), filepath.Base(root), &st)
	}
	if err != nil {
		return nil, fmt.Errorf("walk %s for what %s may write to: %w", root, u.name, err)
	}
	return w.out, nil
}

// direntBuf is the buffer one getdents call fills.
const direntBuf = 32 << 10

// walker is one findWritable.
type walker struct {
	u     *runnerUser
	skip  []string
	out   *scan
	buf   []byte
	names []string
	seen  int
}

// file notes a non-directory entry name of dir: a regular file or a device node holds what is
// written to it (a socket or a pipe passes it on to its reader, and keeps nothing for the next
// run). Its path is made only for one it notes: most of a file system's entries are files.
func (w *walker) file(dir, name string, st *unix.Stat_t) {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFBLK, unix.S_IFCHR:
		if w.u.owns(int(st.Uid)) || w.u.mayMode(st.Uid, st.Gid, st.Mode, 2) {
			w.out.files = append(w.out.files, filepath.Join(dir, name))
		}
	}
}

// dir walks directory p (stat st), outside the skipped trees.
func (w *walker) dir(p string, st *unix.Stat_t) error {
	if w.seen++; w.seen > maxScanDirs {
		return fmt.Errorf("more than %d directories", maxScanDirs)
	}
	if !w.u.mayMode(st.Uid, st.Gid, st.Mode, 1) {
		return nil // u cannot reach anything below
	}
	w.out.dirs[p] = stampOfUnix(st)
	if w.u.mayMode(st.Uid, st.Gid, st.Mode, 2) || w.u.owns(int(st.Uid)) { // one it owns it may make writable
		if w.u.owns(int(st.Uid)) && inside(p, w.out.writable) {
			return nil // swept whole with the one above
		}
		w.out.writable = append(w.out.writable, p)
	}
	type sub struct {
		path string
		st   unix.Stat_t
	}
	var subs []sub
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return nil // gone, or replaced meanwhile
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", p, err)
	}
	err = func() error {
		defer func() { _ = unix.Close(fd) }()
		for {
			n, err := unix.Getdents(fd, w.buf)
			if err != nil {
				return fmt.Errorf("read %s: %w", p, err)
			}
			if n <= 0 {
				return nil
			}
			w.names = w.names[:0]
			for b := w.buf[:n]; len(b) > 0; {
				var used int
				used, _, w.names = unix.ParseDirent(b, -1, w.names)
				b = b[used:]
			}
			for _, name := range w.names {
				var cst unix.Stat_t
				if err := unix.Fstatat(fd, name, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					if errors.Is(err, unix.ENOENT) {
						continue
					}
					return fmt.Errorf("stat %s/%s: %w", p, name, err)
				}
				switch cst.Mode & unix.S_IFMT {
				case unix.S_IFDIR:
					if child := filepath.Join(p, name); !inside(child, w.skip) {
						subs = append(subs, sub{child, cst})
					}
				case unix.S_IFLNK:
					// a link is no place to write: its target is walked where it lies
				default:
					w.file(p, name, &cst)
				}
			}
		}
	}()
	if err != nil {
		return err
	}
	for i := range subs {
		if err := w.dir(subs[i].path, &subs[i].st); err != nil {
			return err
		}
	}
	return nil
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
	skip := slices.Concat(scanSkip, nonLocalMounts(), own, h.cfg.TmpDirs, h.cfg.Runner.WritableDirs, h.cfg.WalkSkip)
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
	// The walk's garbage (a FileInfo per entry of the whole file system) goes back to the
	// system now, rather than stay in the agent's resident memory for the instance's life.
	debug.FreeOSMemory()
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
