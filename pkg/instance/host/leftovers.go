package host

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// What a run can leave that outlives every one of its processes and lies outside its files:
// System V IPC objects (they live until removed), at jobs, a crontab, and systemd lingering for
// the user. removeLeftovers removes them.

// sysvIPC lists the System V IPC tables: the file under /proc/sysvipc, the column of the id, and
// ipcrm's option for that kind.
var sysvIPC = []struct{ file, idColumn, option string }{
	{"shm", "shmid", "--shmem-id"},
	{"msg", "msqid", "--queue-id"},
	{"sem", "semid", "--semaphore-id"},
}

// sysvIPCDir is where the kernel lists IPC objects (a variable for tests).
var sysvIPCDir = "/proc/sysvipc"

// lingerDir holds systemd-logind's lingering flags, one file per user.
var lingerDir = "/var/lib/systemd/linger"

func removeLeftovers(ctx context.Context, u *runnerUser, t tools) error {
	var errs []error
	errs = append(errs, removeSysVIPC(ctx, t.ipcrm, u.owns), removeAtJobs(ctx, t, u.name))
	if err := os.Remove(filepath.Join(lingerDir, u.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("turn off lingering for %s: %w", u.name, err))
	}
	errs = append(errs, removeCrontab(u.name))
	return errors.Join(errs...)
}

// removeSysVIPC removes, with ipcrm (its path), every shared memory segment, message queue and
// semaphore set owned or created by a uid for which owns holds.
func removeSysVIPC(ctx context.Context, ipcrm string, owns func(uid int) bool) error {
	var errs []error
	for _, kind := range sysvIPC {
		ids, err := ipcOwnedBy(filepath.Join(sysvIPCDir, kind.file), kind.idColumn, owns)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(ids) > 0 && ipcrm == "" {
			errs = append(errs, fmt.Errorf("%s %s of the run: ipcrm is not on %s", kind.file, strings.Join(ids, " "), rootPath))
			continue
		}
		for _, id := range ids {
			if out, err := rootCommand(ctx, ipcrm, kind.option, id).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ipcrm %s %s: %w: %s", kind.option, id, err, strings.TrimSpace(string(out))))
			}
		}
	}
	return errors.Join(errs...)
}

// ipcOwnedBy reads one /proc/sysvipc table and returns the ids of the objects whose owner (uid)
// or creator (cuid) is a uid for which owns holds.
func ipcOwnedBy(path, idColumn string, owns func(uid int) bool) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return nil, sc.Err()
	}
	cols := map[string]int{}
	for i, name := range strings.Fields(sc.Text()) {
		cols[name] = i
	}
	idCol, okID := cols[idColumn]
	uidCol, okUID := cols["uid"]
	cuidCol, okCUID := cols["cuid"]
	if !okID || !okUID || !okCUID {
		return nil, fmt.Errorf("%s: unexpected header %q", path, sc.Text())
	}
	ownedBy := func(s string) bool {
		n, err := strconv.Atoi(s)
		return err == nil && owns(n)
	}
	var ids []string
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) <= max(idCol, uidCol, cuidCol) {
			continue
		}
		if ownedBy(f[uidCol]) || ownedBy(f[cuidCol]) {
			ids = append(ids, f[idCol])
		}
	}
	return ids, sc.Err()
}
