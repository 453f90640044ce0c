package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// removeTree removes dir and everything below it without following any symlink on the way:
// dir's parent is opened as an os.Root, so that neither a symlink in place of dir nor one
// inside it leads the removal anywhere else. A missing dir is not an error.
func removeTree(dir string) error {
	parent, name := filepath.Split(filepath.Clean(dir))
	root, err := os.OpenRoot(parent)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	defer func() { _ = root.Close() }()
	if err := root.RemoveAll(name); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// removeOwned removes, below dir, every entry owned by a uid for which owns holds (a whole tree when it is a
// directory), without following symlinks. It descends only into directories others may write
// to (world-writable, like /tmp's own subdirectories), since only there can those uids have created
// anything; entries that vanish meanwhile are fine.
func removeOwned(dir string, owns func(uid int) bool) error {
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("clean %s: %w", dir, err)
	}
	defer func() { _ = root.Close() }()
	var errs []error
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if p == "." {
				return err
			}
			errs = append(errs, err)
			return fs.SkipDir
		}
		if p == "." {
			return nil
		}
		owner, mode, ok := ownerOf(d)
		if !ok {
			return nil // gone meanwhile
		}
		if owns(owner) {
			if err := root.RemoveAll(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove %s: %w", filepath.Join(dir, p), err))
			}
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() && mode.Perm()&0o002 == 0 {
			return fs.SkipDir // nobody but its owner and group writes here
		}
		return nil
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("clean %s: %w", dir, err))
	}
	return errors.Join(errs...)
}

// ownerOf returns the owner and mode of a walked entry (not following a symlink); ok is false
// when it is gone.
func ownerOf(d fs.DirEntry) (uid int, mode fs.FileMode, ok bool) {
	info, err := d.Info()
	if err != nil {
		return 0, 0, false
	}
	st, isStat := info.Sys().(*syscall.Stat_t)
	if !isStat {
		return 0, 0, false
	}
	return int(st.Uid), info.Mode(), true
}
