package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// What root's services keep of a run where the runner user may read it later but cannot write:
// crash handlers' cores and reports of its processes (systemd-coredump's, readable to the user
// through coredumpctl; apport's), and journald's per-user journal files, which hold what its
// processes logged (and a crash's metadata: its environment). The helper keeps the runs'
// processes from dumping cores at all (RLIMIT_CORE, package runas); after each run the agent
// removes whatever such a service kept of the user anyway.

// Where those services keep what they keep (variables for tests).
var (
	coredumpDir = "/var/lib/systemd/coredump"
	crashDir    = "/var/crash"
	journalDirs = []string{"/var/log/journal", "/run/log/journal"}
)

// removeCrashes removes the crash handlers' cores and reports of processes of a uid for which
// owns holds, found by the uid their names carry (systemd-coredump's
// core.<comm>.<uid>.<boot>.<pid>.<time>[.zst]; apport's <path>.<uid>.crash), whoever owns the file.
// It returns what it removed.
func removeCrashes(owns func(uid int) bool) ([]string, error) {
	var removed []string
	var errs []error
	remove := func(dir string, uidOf func(name string) (int, bool)) {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return
		}
		if err != nil {
			errs = append(errs, err)
			return
		}
		for _, e := range entries {
			if uid, ok := uidOf(e.Name()); ok && owns(uid) && !e.IsDir() {
				p := filepath.Join(dir, e.Name())
				if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, err)
					continue
				}
				removed = append(removed, p)
			}
		}
	}
	remove(coredumpDir, func(name string) (int, bool) {
		f := strings.Split(name, ".")
		if n := len(f); n == 7 && (f[6] == "zst" || f[6] == "xz" || f[6] == "lz4") {
			f = f[:6] // compressed
		}
		if len(f) != 6 || f[0] != "core" {
			return 0, false
		}
		uid, err := strconv.Atoi(f[2])
		return uid, err == nil
	})
	remove(crashDir, func(name string) (int, bool) {
		base, ok := strings.CutSuffix(name, ".crash")
		if !ok {
			return 0, false
		}
		uid, err := strconv.Atoi(base[strings.LastIndexByte(base, '.')+1:])
		return uid, err == nil
	})
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("remove crash dumps: %w", err)
	}
	return removed, nil
}

// removeUserJournals removes journald's journal files of uid (user-<uid>.journal, archived
// user-<uid>@….journal and user-<uid>@….journal~), in the persistent and the volatile journal,
// after asking journald to close its active files (journalctl --rotate, when systemd runs). It
// returns what it removed.
func removeUserJournals(ctx context.Context, journalctl string, uid int) ([]string, error) {
	var files []string
	prefix := "user-" + strconv.Itoa(uid)
	for _, root := range journalDirs {
		dirs, _ := filepath.Glob(filepath.Join(root, "*")) // one per machine id
		for _, d := range dirs {
			entries, err := os.ReadDir(d)
			if err != nil {
				continue
			}
			for _, e := range entries {
				n := e.Name()
				if !e.IsDir() && (n == prefix+".journal" || strings.HasPrefix(n, prefix+"@")) {
					files = append(files, filepath.Join(d, n))
				}
			}
		}
	}
	if len(files) == 0 {
		return nil, nil
	}
	if journalctl != "" && booted() {
		// The active file goes to the archive and journald lets go of it; a failure leaves it open,
		// and it is removed anyway (journald then writes to a file no one can open).
		_ = rootCommand(ctx, journalctl, "--rotate").Run()
	}
	var removed []string
	var errs []error
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, f)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("remove the runner user's journals: %w", err)
	}
	return removed, nil
}
