package host

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// runDirs are one run's directories under a root-owned parent (so the runner user cannot swap
// them for symlinks): its runner, made from the root-owned install, and its work directory.
type runDirs struct {
	base, runner, work string
}

// runDirsAt returns the directories of the run whose parent is base (not made yet).
func runDirsAt(base string) runDirs {
	return runDirs{base: base, runner: filepath.Join(base, "runner"), work: filepath.Join(base, "work")}
}

// make builds the run's directories: the parent root-owned, the runner a tree of the install
// whose directories the user owns (the runner writes its registration and logs there) and whose
// files are hard links to the install's root-owned, read-only files, the work directory empty.
func (d runDirs) make(install string, u *runnerUser) error {
	if err := removeTree(d.base); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(d.base), 0o755); err != nil {
		return fmt.Errorf("make %s: %w", filepath.Dir(d.base), err)
	}
	if err := os.Mkdir(d.base, 0o755); err != nil {
		return fmt.Errorf("make %s: %w", d.base, err)
	}
	if err := linkTree(install, d.runner, u.uid, u.gid); err != nil {
		return fmt.Errorf("make the run's runner from %s: %w", install, err)
	}
	if err := os.Mkdir(d.work, 0o750); err != nil {
		return fmt.Errorf("make %s: %w", d.work, err)
	}
	return os.Lchown(d.work, u.uid, u.gid)
}

// linkTree makes dst a tree like src: directories owned by uid:gid, regular files hard-linked
// (copied when src and dst are on different file systems) and so still root's and read-only,
// symlinks recreated. src must be root-owned and not writable by others (see hardenInstall).
func linkTree(src, dst string, uid, gid int) error { return cloneTree(src, dst, uid, gid, true) }

// copyTree copies src into dst (made when missing), everything owned by uid:gid, without
// following symlinks (they are copied as symlinks).
func copyTree(src, dst string, uid, gid int) error { return cloneTree(src, dst, uid, gid, false) }

func cloneTree(src, dst string, uid, gid int, link bool) error {
	return walkInstall(src, func(rel string, d fs.DirEntry) error {
		to, from := filepath.Join(dst, rel), filepath.Join(src, rel)
		switch {
		case d.IsDir():
			err := os.Mkdir(to, 0o755)
			if rel == "." && errors.Is(err, fs.ErrExist) {
				err = nil // copyTree's destination may exist already
			}
			if err != nil {
				return err
			}
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(from)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
		case d.Type().IsRegular() && link:
			err := os.Link(from, to)
			if errors.Is(err, syscall.EXDEV) {
				err = copyFile(from, to)
			}
			return err // a link shares the install's inode: never chown it
		case d.Type().IsRegular():
			if err := copyFile(from, to); err != nil {
				return err
			}
		default:
			return nil // devices, sockets: nothing a runner or a skeleton ships
		}
		return os.Lchown(to, uid, gid)
	})
}

// walkInstall walks src (not following symlinks) calling fn with paths relative to src.
func walkInstall(src string, fn func(rel string, d fs.DirEntry) error) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		return fn(rel, d)
	})
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, st.Mode().Perm())
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// hardenInstall makes the runner install root's and read-only for everyone else, so that no run
// can change what the next run's runner is made from.
func hardenInstall(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, 0, 0); err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.Chmod(p, info.Mode().Perm()&^0o022)
	})
}
