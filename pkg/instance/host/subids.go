package host

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// Subordinate ids (/etc/subuid, /etc/subgid) let a user map other uids and gids into a user
// namespace of its own (newuidmap): a job's process then runs as one of them, and nothing that
// looks for the runner user's uid finds it. The agent refuses to serve when the runner user has
// any, unless the pool opts into user namespaces (rootless containers need them); then the
// sweeps and checks after each run cover those uids too.

// Where subordinate ids are listed (variables for tests).
var (
	subuidFile = "/etc/subuid"
	subgidFile = "/etc/subgid"
)

// idRange is a range of subordinate ids: count ids from start.
type idRange struct{ start, count int }

func (r idRange) contains(id int) bool { return id >= r.start && id < r.start+r.count }

func (r idRange) String() string { return fmt.Sprintf("%d-%d", r.start, r.start+r.count-1) }

// parseSubIDs returns the ranges that lines "<user name or uid>:<start>:<count>" give the user
// called name with uid id. Blank lines and comments are skipped; a malformed line of the user is an
// error (it would otherwise hide a range).
func parseSubIDs(r io.Reader, name string, id int) ([]idRange, error) {
	var out []idRange
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ":")
		if f[0] != name && f[0] != strconv.Itoa(id) {
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("line %d %q: want <user>:<first id>:<count>", n, line)
		}
		start, err1 := strconv.Atoi(f[1])
		count, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || start < 0 || count < 0 {
			return nil, fmt.Errorf("line %d %q: want <user>:<first id>:<count>", n, line)
		}
		if count > 0 {
			out = append(out, idRange{start: start, count: count})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// subordinateIDs reads file's ranges of the user; a missing file lists none.
func subordinateIDs(file, name string, id int) ([]idRange, error) {
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	defer f.Close()
	r, err := parseSubIDs(f, name, id)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	return r, nil
}

// checkSubordinateIDs reads the runner user's subordinate uids and gids. Any is an error unless
// userNamespaces; the uid ranges are returned for the sweeps.
func checkSubordinateIDs(u *runnerUser, userNamespaces bool) ([]idRange, error) {
	var uids []idRange
	for _, file := range []string{subuidFile, subgidFile} {
		// Both files name the user who may map the ids, by login name or by uid (newgidmap
		// matches /etc/subgid against the calling user's uid, not its gid).
		ranges, err := subordinateIDs(file, u.name, u.uid)
		if err != nil {
			return nil, err
		}
		if len(ranges) > 0 && !userNamespaces {
			return nil, fmt.Errorf("the runner user %s has subordinate ids in %s (%s): with them a job hides its processes under other uids; remove them (useradd -K SUB_UID_COUNT=0 -K SUB_GID_COUNT=0) or set the pool's runner.userNamespaces",
				u.name, file, rangesString(ranges))
		}
		if file == subuidFile {
			uids = ranges
		}
	}
	return uids, nil
}

func rangesString(rs []idRange) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}
