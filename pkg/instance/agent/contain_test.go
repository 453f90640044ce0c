package agent_test

import (
	"fmt"
	"os"
	osuser "os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// scheduleJob is run A's job in TestContainedRun: it tries to make a user namespace, to schedule
// work for later with at and cron, and to leave a key in the user's keyring for the next run.
const scheduleJob = `
if unshare --user --map-root-user true 2>/dev/null; then echo "userns=made"; else echo "userns=refused"; fi
if echo "touch /tmp/at-$TAG" | at now + 5 minutes 2>/dev/null; then echo "at=scheduled"; else echo "at=refused"; fi
if echo "* * * * * touch /tmp/cron-$TAG" | crontab - 2>/dev/null; then echo "cron=scheduled"; else echo "cron=refused"; fi
keyctl add user "hangar-$TAG" "secret-$TAG" @u >/dev/null && echo "key=added"
echo "contained job done"
`

// TestContainedRun: a job of the default pool may not make a user namespace, may not use at or
// cron, and a key it leaves in its user keyring is gone when run B starts.
func TestContainedRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.launch(time.Time{})
	in := e.warm(id)
	tag := strings.TrimPrefix(id, "i-")
	user := e.Sim.RunnerUser(id)

	claimed := e.claim(in, "4001")
	reg := e.waitSignal(id, state.SignalRegistered, "4001", claimed.Version)
	running := e.transition(state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: reg.Version, RunID: "4001"})
	job := e.GH.QueueJob(repo, []string{"4001"}, "export TAG="+tag+"\n"+scheduleJob)
	done, err := e.GH.WaitJob(e.ctx, job)
	require.NoError(t, err)
	out := done.Output
	require.Contains(t, out, "contained job done", out)
	require.Contains(t, out, "key=added", "the job could use its keyring:\n%s", out)

	released := e.release(running)
	e.waitSignal(id, state.SignalDeregistered, "4001", released.Version)

	t.Run("a user namespace is refused", func(t *testing.T) {
		require.Contains(t, out, "userns=refused", out)
	})
	t.Run("at and cron are refused", func(t *testing.T) {
		require.Contains(t, out, "at=refused", out)
		require.Contains(t, out, "cron=refused", out)
	})
	t.Run("nothing of run A is scheduled when run B starts", func(t *testing.T) {
		for _, d := range []string{"/var/spool/cron/crontabs", "/var/spool/cron"} {
			require.NoFileExists(t, filepath.Join(d, user), "run A's crontab")
		}
		entries, _ := os.ReadDir("/var/spool/cron/atjobs")
		uid := processUID(t, user)
		for _, en := range entries {
			info, err := en.Info()
			if err != nil {
				continue
			}
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				require.NotEqual(t, uid, strconv.Itoa(int(st.Uid)), "an at job of run A is queued: %s", en.Name())
			}
		}
	})

	claimed = e.claim(e.must(e.Store.Get(e.ctx, id)), "4002")
	reg = e.waitSignal(id, state.SignalRegistered, "4002", claimed.Version)
	e.transition(state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: reg.Version, RunID: "4002"})
	job = e.GH.QueueJob(repo, []string{"4002"}, `if keyctl search @u user "hangar-`+tag+`" >/dev/null 2>&1; then echo "key=found $(keyctl print $(keyctl search @u user hangar-`+tag+`))"; else echo "key=gone"; fi`)
	doneB, err := e.GH.WaitJob(e.ctx, job)
	require.NoError(t, err)
	t.Run("run A's key is not readable by run B", func(t *testing.T) {
		require.Contains(t, doneB.Output, "key=gone", doneB.Output)
		require.NotContains(t, doneB.Output, "secret-"+tag)
	})
}

// subIDsLock serialises this package's edits of /etc/subuid and /etc/subgid.
var subIDsLock = filepath.Join(os.TempDir(), "hangar-testbed-subids.lock")

// giveSubordinateIDs adds a range of 65536 subordinate uids and gids for user to /etc/subuid and
// /etc/subgid (under a lock shared by every test process) and removes exactly those lines when
// the test ends. It returns the range's first id.
func giveSubordinateIDs(t *testing.T, user string) int {
	t.Helper()
	u, err := osuser.Lookup(user)
	require.NoError(t, err)
	uid, err := strconv.Atoi(u.Uid)
	require.NoError(t, err)
	start := 1_000_000 + uid*65536 // unique per user, far from useradd's ranges
	line := fmt.Sprintf("%s:%d:65536", user, start)
	edit := func(add bool) {
		lock, err := os.OpenFile(subIDsLock, os.O_CREATE|os.O_RDWR, 0o600)
		require.NoError(t, err)
		defer lock.Close()
		require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
		for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
			b, err := os.ReadFile(f)
			if err != nil && !os.IsNotExist(err) {
				require.NoError(t, err)
			}
			var keep []string
			for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
				if l != "" && l != line {
					keep = append(keep, l)
				}
			}
			if add {
				keep = append(keep, line)
			}
			content := strings.Join(keep, "\n")
			if content != "" {
				content += "\n"
			}
			require.NoError(t, os.WriteFile(f, []byte(content), 0o644))
		}
	}
	edit(true)
	t.Cleanup(func() { edit(false) })
	return start
}

// restartWith stops the instance, runs between while its agent is down, and starts it again.
func (e *env) restartWith(id string, between func()) {
	e.t.Helper()
	_, err := e.EC2.StopInstances(e.ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}})
	require.NoError(e.t, err)
	require.Eventually(e.t, func() bool { return e.Sim.AgentPID(id) == 0 }, time.Minute, 50*time.Millisecond, "the agent stops with its machine")
	between()
	_, err = e.EC2.StartInstances(e.ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}})
	require.NoError(e.t, err)
	require.Eventually(e.t, func() bool { return e.Sim.AgentPID(id) != 0 }, time.Minute, 50*time.Millisecond, "the agent starts with its machine")
}

// TestSubordinateIDsRefused: the runner user of a pool without user namespaces has subordinate
// ids; the agent signals FAILED naming /etc/subuid and serves nothing.
func TestSubordinateIDsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{Baked: true})
	id := e.launch(time.Time{})
	in := e.warm(id)
	user := e.Sim.RunnerUser(id)
	e.restartWith(id, func() { giveSubordinateIDs(t, user) })

	failed := e.waitSignal(id, state.SignalFailed, "", in.Version)
	require.Contains(t, failed.SignalLog, "/etc/subuid", failed.SignalLog)
	require.Contains(t, failed.SignalLog, user)
	claimed := e.claim(e.must(e.Store.Get(e.ctx, id)), "4101")
	require.Never(t, func() bool {
		it, err := e.Store.Get(e.ctx, id)
		return err == nil && it.AckVersion >= claimed.Version
	}, 3*time.Second, 100*time.Millisecond, "the agent took the assignment")
	require.NotContains(t, e.Sim.AgentLog(id), "runner registered")
}

// nsDaemonJob is run A's job in TestUserNamespaceDaemon: a daemon in a user namespace of its own,
// running as a subordinate uid, tries the instance's metadata and leaves a file in /tmp.
const nsDaemonJob = `
unshare --user --map-auto --setuid 0 --setgid 0 sh -c '
  echo made > /tmp/ns-left-$TAG
  if curl -s -m 3 -o /dev/null "$METADATA/latest/meta-data/"; then echo reached > /tmp/ns-probe-$TAG; else echo refused > /tmp/ns-probe-$TAG; fi
  exec sleep 600' </dev/null >/dev/null 2>&1 &
echo "ns-pid=$!"
for i in $(seq 1 100); do [ -s /tmp/ns-probe-$TAG ] && break; sleep 0.2; done
echo "metadata=$(cat /tmp/ns-probe-$TAG 2>/dev/null || echo unknown)"
echo "ns job done"
`

// TestUserNamespaceDaemon: in a pool that allows user namespaces, with subordinate ids for the
// runner user, run A leaves a daemon whose uid is a subordinate one; it could not reach the
// metadata endpoint, and when run B is claimed it is dead and its files are gone.
func TestUserNamespaceDaemon(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/newuidmap"); err != nil {
		t.Fatal("newuidmap is missing: make testbed-up installs uidmap")
	}
	e := newEnv(t, envOptions{Baked: true})
	require.NoError(t, e.UpdatePool(e.ctx, func(d *pooldoc.Document) { d.Runner.UserNamespaces = true }))
	id := e.launch(time.Time{})
	e.warm(id)
	user := e.Sim.RunnerUser(id)
	tag := strings.TrimPrefix(id, "i-")
	var start int
	e.restartWith(id, func() { start = giveSubordinateIDs(t, user) })

	claimed := e.claim(e.must(e.Store.Get(e.ctx, id)), "4201")
	reg := e.waitSignal(id, state.SignalRegistered, "4201", claimed.Version)
	running := e.transition(state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: reg.Version, RunID: "4201"})
	job := e.GH.QueueJob(repo, []string{"4201"}, fmt.Sprintf("export TAG=%s METADATA=%s\n%s", tag, e.Sim.MetadataURL(id), nsDaemonJob))
	done, err := e.GH.WaitJob(e.ctx, job)
	require.NoError(t, err)
	out := done.Output
	require.Contains(t, out, "ns job done", out)
	m := regexp.MustCompile(`ns-pid=(\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	pid, _ := strconv.Atoi(m[1])
	require.True(t, alive(pid), "the daemon runs before the release:\n%s", out)
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	uid := regexp.MustCompile(`(?m)^Uid:\s+(\d+)`).FindStringSubmatch(string(st))
	require.NotNil(t, uid)
	daemonUID, _ := strconv.Atoi(uid[1])
	require.True(t, daemonUID >= start && daemonUID < start+65536, "the daemon runs as subordinate uid %d (range from %d)", daemonUID, start)
	require.FileExists(t, "/tmp/ns-left-"+tag, "the daemon left a file")

	released := e.release(running)
	e.waitSignal(id, state.SignalDeregistered, "4201", released.Version)
	claimed = e.claim(e.must(e.Store.Get(e.ctx, id)), "4202")
	e.waitSignal(id, state.SignalRegistered, "4202", claimed.Version)

	t.Run("the daemon could not reach the metadata endpoint", func(t *testing.T) {
		require.Contains(t, out, "metadata=refused", out)
	})
	t.Run("the daemon is dead when run B starts", func(t *testing.T) {
		require.False(t, alive(pid), "the daemon (pid %d, uid %d) outlived its run", pid, daemonUID)
	})
	t.Run("its files are gone", func(t *testing.T) {
		for _, p := range []string{"/tmp/ns-left-" + tag, "/tmp/ns-probe-" + tag} {
			_, err := os.Lstat(p)
			require.True(t, os.IsNotExist(err), "%s survived the run", p)
		}
	})
}
