package agent_test

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// hostileJob is run A's job: it tries every way we know of to leave something behind for the
// next run on the instance, to read what it should not, or to make the agent (root) destroy
// something outside the run. It reports what it did on its output, since the files it could
// write anywhere are exactly what the cleanup removes.
const hostileJob = `
W=$GITHUB_WORKSPACE
BASE=$(cd "$W/../../.." && pwd)
RD=$BASE/runner
echo "runner-dir=$RD"
# 1. rewrite config.sh and run.sh of the runner (the run's copy; the install is root's)
echo "x" >> "$INSTALL/config.sh" 2>/dev/null && echo "install-writable" || echo "install-readonly"
rm -f "$RD/config.sh" "$RD/run.sh"
printf '#!/bin/sh\necho pwned > /tmp/pwned-$TAG\nexec sleep 600\n' > "$RD/config.sh"
cp "$RD/config.sh" "$RD/run.sh"; chmod +x "$RD/config.sh" "$RD/run.sh"
# 2. processes that leave the job's process group and session
setsid sh -c 'exec sleep 601' </dev/null >/dev/null 2>&1 &
echo "setsid-pid=$!"
sh -c 'sh -c "echo double-pid=\$\$; exec sleep 602 >/dev/null 2>&1" &' </dev/null 2>/dev/null
RUNNER_TRACKING_ID= nohup sh -c 'exec sleep 603' </dev/null >/dev/null 2>&1 &
echo "nohup-pid=$!"
# 3. HOME and the shared temporary directories
echo "evil-$TAG" >> "$HOME/.bashrc"
mkdir -p "$HOME/.ssh" && echo "ssh-ed25519 AAAA attacker" > "$HOME/.ssh/authorized_keys"
for d in /tmp /var/tmp /dev/shm; do echo left > "$d/hostile-$TAG"; done
mkdir -p /tmp/hostile-dir-$TAG && echo left > /tmp/hostile-dir-$TAG/file
ln -s "$CANARY" "/tmp/hostile-link-$TAG"
ln -s "$CANARY" "$HOME/canary-link"
ipcmk --shmem=4096 >/dev/null && echo "ipc-made"
# 4. the work directory replaced with a symlink to a directory outside it
WORKDIR=$(dirname "$(dirname "$W")")
cd /
rm -rf "$WORKDIR"/app
ln -s "$CANARY" "$WORKDIR"/app
rm -rf "$WORKDIR" 2>/dev/null; ls -ld "$WORKDIR" >/dev/null 2>&1 && echo "work-kept"
# 5. the instance's identity
if curl -s -m 3 -X PUT "$METADATA/latest/api/token" -H "X-aws-ec2-metadata-token-ttl-seconds: 60" >/dev/null; then
  echo "metadata=reached"
else
  echo "metadata=refused"
fi
echo "hostile job done"
`

// TestHostileJob: run A's job tries each trick above; run B on the same instance then finds no
// trace of A. Each trick is asserted on its own, so that a regression names itself.
func TestHostileJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.launch(time.Time{})
	in := e.warm(id)
	tag := strings.TrimPrefix(id, "i-")

	canary, err := os.MkdirTemp("", "hangar-canary-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(canary) })
	require.NoError(t, os.Chmod(canary, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(canary, "canary.txt"), []byte("alive"), 0o644))
	install := e.Sim.RunnerDir(id)
	pristine := fileSum(t, filepath.Join(install, "config.sh"))

	// Run A.
	claimed := e.claim(in, "3001")
	reg := e.waitSignal(id, state.SignalRegistered, "3001", claimed.Version)
	running := e.transition(state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: reg.Version, RunID: "3001"})
	env := fmt.Sprintf("TAG=%s CANARY=%s INSTALL=%s METADATA=%s", tag, canary, install, e.Sim.MetadataURL(id))
	job := e.GH.QueueJob(repo, []string{"3001"}, "export "+env+"\n"+hostileJob)
	done, err := e.GH.WaitJob(e.ctx, job)
	require.NoError(t, err)
	require.Contains(t, done.Output, "hostile job done", done.Output)
	out := done.Output
	pids := map[string]int{}
	for _, m := range regexp.MustCompile(`(setsid|double|nohup)-pid=(\d+)`).FindAllStringSubmatch(out, -1) {
		pids[m[1]], _ = strconv.Atoi(m[2])
	}
	require.Len(t, pids, 3, "the job reported its daemons:\n%s", out)
	for name, pid := range pids {
		require.True(t, alive(pid), "%s daemon %d runs before the release", name, pid)
	}
	user := e.Sim.RunnerUser(id)
	home := filepath.Join("/home", user)
	require.FileExists(t, filepath.Join(home, ".ssh", "authorized_keys"), "the job could write its home")

	released := e.release(running)
	e.waitSignal(id, state.SignalDeregistered, "3001", released.Version)

	t.Run("the install is read-only to the runner", func(t *testing.T) {
		require.Contains(t, out, "install-readonly")
		require.Equal(t, pristine, fileSum(t, filepath.Join(install, "config.sh")))
	})
	t.Run("no process of run A survives", func(t *testing.T) {
		for name, pid := range pids {
			require.False(t, alive(pid), "the %s daemon (pid %d) outlived its run", name, pid)
		}
		require.Empty(t, processesOf(t, user), "processes of %s outlived the run", user)
	})
	t.Run("home is reset", func(t *testing.T) {
		require.NoDirExists(t, filepath.Join(home, ".ssh"))
		require.NoFileExists(t, filepath.Join(home, "canary-link"))
		b, _ := os.ReadFile(filepath.Join(home, ".bashrc"))
		require.NotContains(t, string(b), "evil-"+tag)
	})
	t.Run("temporary files are removed", func(t *testing.T) {
		for _, p := range []string{"/tmp/hostile-" + tag, "/var/tmp/hostile-" + tag, "/dev/shm/hostile-" + tag,
			"/tmp/hostile-dir-" + tag, "/tmp/hostile-link-" + tag} {
			_, err := os.Lstat(p)
			require.True(t, os.IsNotExist(err), "%s survived the run", p)
		}
	})
	t.Run("the symlinked work directory did not lead the cleanup outside", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(canary, "canary.txt"))
		require.NoError(t, err, "the canary outside the run was removed")
		require.Equal(t, "alive", string(b))
		require.Contains(t, out, "work-kept", "the work directory's root-owned parent kept it in place")
		left, err := os.ReadDir(e.Sim.RunsDir(id))
		require.NoError(t, err)
		require.Empty(t, left, "the run's directories are gone")
	})
	t.Run("System V IPC objects are removed", func(t *testing.T) {
		require.Contains(t, out, "ipc-made")
		b, err := os.ReadFile("/proc/sysvipc/shm")
		require.NoError(t, err)
		uid := processUID(t, user)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			if f := strings.Fields(line); len(f) > 7 {
				require.NotEqual(t, uid, f[7], "a shared memory segment of run A is left: %s", line)
			}
		}
	})
	t.Run("the metadata endpoint refused the runner", func(t *testing.T) {
		require.Contains(t, out, "metadata=refused")
	})

	// Run B on the same instance.
	claimed = e.claim(e.must(e.Store.Get(e.ctx, id)), "3002")
	reg = e.waitSignal(id, state.SignalRegistered, "3002", claimed.Version)
	e.transition(state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: reg.Version, RunID: "3002"})
	job = e.GH.QueueJob(repo, []string{"3002"}, `RD=$(cd "$GITHUB_WORKSPACE/../../../runner" && pwd); sha256sum "$RD/config.sh" "$RD/run.sh"; ls /tmp/pwned-`+tag+` 2>&1; echo "home: $(ls -A $HOME)"`)
	doneB, err := e.GH.WaitJob(e.ctx, job)
	require.NoError(t, err)
	t.Run("run B's config.sh and run.sh are the pristine ones", func(t *testing.T) {
		require.Contains(t, doneB.Output, pristine, doneB.Output)
		require.Contains(t, doneB.Output, fileSum(t, filepath.Join(install, "run.sh")), doneB.Output)
		require.Contains(t, doneB.Output, "No such file", "A's rewritten config.sh never ran")
	})
	runners := e.GH.Runners(repo)
	require.Len(t, runners, 1)
	require.Equal(t, e.RunnerNames().Name(id, "3002"), runners[0].Name, "B registered with the pristine scripts")
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

// alive reports whether pid is a live process (not a zombie).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(b), ") Z ")
}

// processUID returns a user's uid from /etc/passwd.
func processUID(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("/etc/passwd")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, ":"); len(f) > 2 && f[0] == name {
			return f[2]
		}
	}
	require.Failf(t, "no such user", "%s", name)
	return ""
}

// processesOf lists the pids of name's processes.
func processesOf(t *testing.T, name string) []string {
	t.Helper()
	uid := processUID(t, name)
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" && f[1] == uid {
				pids = append(pids, e.Name())
			}
		}
	}
	return pids
}
