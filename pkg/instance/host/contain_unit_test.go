package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSubIDs(t *testing.T) {
	t.Parallel()
	const file = `# ranges
runner:100000:65536
other:165536:65536

1001:231072:65536
runner:300000:0
`
	for _, tc := range []struct {
		name, user string
		id         int
		want       []idRange
		err        string
	}{
		{name: "by name", user: "runner", id: 999, want: []idRange{{100000, 65536}}},
		{name: "by id", user: "someone", id: 1001, want: []idRange{{231072, 65536}}},
		{name: "by name and id", user: "runner", id: 1001, want: []idRange{{100000, 65536}, {231072, 65536}}},
		{name: "none", user: "nobody-here", id: 4242},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSubIDs(strings.NewReader(file), tc.user, tc.id)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	_, err := parseSubIDs(strings.NewReader("runner:abc:10\n"), "runner", 1)
	require.ErrorContains(t, err, `line 1 "runner:abc:10"`)
	_, err = parseSubIDs(strings.NewReader("other:abc\n"), "runner", 1)
	require.NoError(t, err, "a malformed line of another user is not ours to judge")
	require.True(t, idRange{100000, 65536}.contains(165535))
	require.False(t, idRange{100000, 65536}.contains(165536))
}

func TestCheckSubordinateIDs(t *testing.T) {
	dir := t.TempDir()
	oldUID, oldGID := subuidFile, subgidFile
	t.Cleanup(func() { subuidFile, subgidFile = oldUID, oldGID })
	subuidFile, subgidFile = filepath.Join(dir, "subuid"), filepath.Join(dir, "subgid")
	u := &runnerUser{name: "runner", uid: 999, gid: 998}

	got, err := checkSubordinateIDs(u, false)
	require.NoError(t, err, "no files: no ranges")
	require.Empty(t, got)

	// /etc/subgid names users too, by name or uid: 998 is another user's uid, not the runner's
	// gid.
	require.NoError(t, os.WriteFile(subgidFile, []byte("998:400000:10\n"), 0o644))
	_, err = checkSubordinateIDs(u, false)
	require.NoError(t, err, "a range of the user whose uid is 998")
	require.NoError(t, os.WriteFile(subgidFile, []byte("999:500000:10\n"), 0o644))
	_, err = checkSubordinateIDs(u, false)
	require.ErrorContains(t, err, subgidFile+" (500000-500009)", "a subgid range keyed by the runner's uid")
	require.NoError(t, os.WriteFile(subgidFile, []byte("runner:500000:10\n"), 0o644))
	_, err = checkSubordinateIDs(u, false)
	require.ErrorContains(t, err, subgidFile+" (500000-500009)", "a subgid range keyed by the runner's name")

	require.NoError(t, os.WriteFile(subuidFile, []byte("runner:100000:65536\n"), 0o644))
	_, err = checkSubordinateIDs(u, false)
	require.ErrorContains(t, err, subuidFile+" (100000-165535)")
	require.ErrorContains(t, err, "runner.userNamespaces")

	got, err = checkSubordinateIDs(u, true)
	require.NoError(t, err, "the pool allows user namespaces")
	require.Equal(t, []idRange{{100000, 65536}}, got)
	u.subUIDs = got
	require.True(t, u.owns(999))
	require.True(t, u.owns(100000))
	require.False(t, u.owns(0))
}

func TestOwnCgroup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want, err string }{
		{"v2 only", "0::/system.slice/hangar-agent.service\n", "/system.slice/hangar-agent.service", ""},
		{"hybrid", "9:name=systemd:/\n4:memory:/x\n0::/\n", "/", ""},
		{"v1 only", "4:memory:/x\n1:cpu:/\n", "", "no 0:: line"},
		{"relative", "0::x\n", "", "want an absolute path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ownCgroup(strings.NewReader(tc.in))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestCgroupMount(t *testing.T) {
	t.Parallel()
	const hybrid = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	const unified = `25 20 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
`
	const spaced = `25 20 0:22 / /mnt/my\040cgroups rw shared:9 - cgroup2 none rw
`
	for _, tc := range []struct{ name, in, want, err string }{
		{"hybrid", hybrid, "/sys/fs/cgroup/unified", ""},
		{"unified, optional fields", unified, "/sys/fs/cgroup", ""},
		{"escaped", spaced, "/mnt/my cgroups", ""},
		{"v1 only", "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", "", "no cgroup2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cgroupMount(strings.NewReader(tc.in))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestDenyScheduling(t *testing.T) {
	dir := t.TempDir()
	old := etcDir
	t.Cleanup(func() { etcDir = old })
	etcDir = dir
	require.NoError(t, os.WriteFile(filepath.Join(dir, "at.deny"), []byte("alias\nbackup\n"), 0o640))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cron.allow"), []byte("admin\nrunner\nops\n"), 0o600))

	for range 2 { // idempotent
		require.NoError(t, denyScheduling("runner"))
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		return string(b)
	}
	require.Equal(t, "alias\nbackup\nrunner\n", read("at.deny"))
	require.Equal(t, "runner\n", read("cron.deny"), "made when missing")
	require.Equal(t, "admin\nops\n", read("cron.allow"), "taken out of an allow list")
	require.NoFileExists(t, filepath.Join(dir, "at.allow"), "no allow list is made")
	st, err := os.Stat(filepath.Join(dir, "at.deny"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), st.Mode().Perm(), "the mode is kept")
}
