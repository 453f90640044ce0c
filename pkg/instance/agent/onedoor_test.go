package agent_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	osuser "os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// sshJob is a job that tries the runner user's other ways in: a key of its own in its
// authorized_keys and ssh to the machine (a session outside the run's cgroup, without the
// helper's filter), lingering and a user manager of its own.
const sshJob = `
mkdir -p "$HOME/.ssh" && chmod 700 "$HOME/.ssh"
ssh-keygen -q -t ed25519 -N '' -f "$HOME/.ssh/id" && cat "$HOME/.ssh/id.pub" >> "$HOME/.ssh/authorized_keys" && chmod 600 "$HOME/.ssh/authorized_keys"
if ssh -p "$SSHPORT" -i "$HOME/.ssh/id" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
     "$(id -un)@127.0.0.1" -N -f 2>"$HOME/ssh.err"; then echo "ssh=in"; else echo "ssh=refused"; fi
if loginctl enable-linger 2>/dev/null; then echo "linger=on"; else echo "linger=refused"; fi
if systemd-run --user --quiet true 2>/dev/null; then echo "usermanager=started"; else echo "usermanager=refused"; fi
echo "one door job done"
`

// TestOneDoorIn: the runner user has no login shell, a job that gives itself an ssh key and
// ssh-es to the machine is refused by sshd (which the agent told to deny the user), lingering
// and a user manager are refused, and nothing of the user runs outside the run's cgroup.
func TestOneDoorIn(t *testing.T) {
	t.Parallel()
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		sshd = "/usr/sbin/sshd"
	}
	if _, err := os.Stat(sshd); err != nil {
		t.Fatal("sshd is missing: make testbed-up installs openssh-server")
	}
	e := newEnv(t, envOptions{})
	id := e.launch(time.Time{})
	in := e.warm(id) // Init has told sshd to deny the runner user
	user := e.Sim.RunnerUser(id)
	passwd, err := os.ReadFile("/etc/passwd")
	require.NoError(t, err)
	require.Contains(t, string(passwd), "\n"+user+":", "the runner user")
	for _, line := range strings.Split(string(passwd), "\n") {
		if strings.HasPrefix(line, user+":") {
			require.True(t, strings.HasSuffix(line, ":/usr/sbin/nologin"), "the runner user has no login shell: %s", line)
		}
	}

	// An sshd of the test's own, reading the machine's configuration, as the image's would.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	sshdLog := &testbed.Buffer{} // written by sshd's output copier while the test reads it
	d := exec.Command(sshd, "-D", "-e", "-p", strconv.Itoa(port), "-o", "PidFile=none", "-o", "ListenAddress=127.0.0.1")
	d.Stdout, d.Stderr = sshdLog, sshdLog
	require.NoError(t, d.Start())
	t.Cleanup(func() { _ = d.Process.Kill(); _ = d.Wait() })
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}, time.Minute, 50*time.Millisecond, "sshd listens: %s", sshdLog)

	claimed := e.claim(in, "4701")
	reg := e.waitSignal(id, state.SignalRegistered, "4701", claimed.Version)
	running := e.transition(state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: reg.Version, RunID: "4701"})
	job := e.GH.QueueJob(repo, []string{"4701"}, fmt.Sprintf("export SSHPORT=%d\n%s", port, sshJob))
	done, err := e.GH.WaitJob(e.ctx, job)
	require.NoError(t, err)
	out := done.Output
	require.Contains(t, out, "one door job done", out)
	released := e.release(running)
	e.waitSignal(id, state.SignalDeregistered, "4701", released.Version)

	t.Run("ssh to the machine is refused", func(t *testing.T) {
		require.Contains(t, out, "ssh=refused", out)
		require.Contains(t, sshdLog.String(), "User "+user+" from 127.0.0.1 not allowed because listed in DenyUsers", sshdLog.String())
	})
	t.Run("lingering and a user manager are refused", func(t *testing.T) {
		require.Contains(t, out, "linger=refused", out)
		require.Contains(t, out, "usermanager=refused", out)
	})
	t.Run("nothing of the user ran outside the run's cgroup", func(t *testing.T) {
		require.NotContains(t, e.Sim.AgentLog(id), "outside the run's cgroup")
	})
}

// TestStrayReportedAndKilled: a process of the runner user that runs outside the run's cgroup
// during the run (one that got out by a way in not closed yet: here the test starts it) is
// found, killed and reported, and the instance serves no other run (its containment failed);
// what only a login gives (lingering, a runtime directory under /run/user) is gone after the
// run, and reported.
func TestStrayReportedAndKilled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.launch(time.Time{})
	in := e.warm(id)
	u, err := osuser.Lookup(e.Sim.RunnerUser(id))
	require.NoError(t, err)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)

	claimed := e.claim(in, "4711")
	reg := e.waitSignal(id, state.SignalRegistered, "4711", claimed.Version)
	running := e.transition(state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: reg.Version, RunID: "4711"})

	stray := exec.Command("/bin/sleep", "600")
	stray.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	require.NoError(t, stray.Start())
	ended := make(chan error, 1)
	go func() { ended <- stray.Wait() }()
	select {
	case <-ended:
	case <-time.After(2 * time.Minute):
		_ = stray.Process.Kill()
		t.Fatalf("the stray (pid %d) still runs 2 minutes into the run", stray.Process.Pid)
	}
	// Killed, then reported: the report follows the kill.
	require.Eventually(t, func() bool {
		return strings.Contains(e.Sim.AgentLog(id), fmt.Sprintf("process %d (sleep)", stray.Process.Pid))
	}, time.Minute, 20*time.Millisecond, "the stray is reported")
	require.Contains(t, e.Sim.AgentLog(id), "outside the run's cgroup: it escaped the run's containment; killed")

	// What a login would have left: a runtime directory and lingering.
	runtime := filepath.Join("/run/user", u.Uid)
	require.NoError(t, os.MkdirAll(runtime, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(runtime, "left"), []byte("secret"), 0o600))
	require.NoError(t, os.Chown(runtime, uid, gid))
	linger := filepath.Join("/var/lib/systemd/linger", u.Username)
	require.NoError(t, os.MkdirAll(filepath.Dir(linger), 0o755))
	require.NoError(t, os.WriteFile(linger, nil, 0o644))

	e.release(running)
	failed, err := e.WaitItem(e.ctx, id, time.Minute, "FAILED after the escape", func(it *state.Instance) bool {
		return it.Signal == state.SignalFailed
	})
	require.NoError(t, err)
	require.Contains(t, failed.SignalLog, "escaped the run's cgroup during the run")
	for _, p := range []string{runtime, linger} {
		_, err := os.Lstat(p)
		require.True(t, os.IsNotExist(err), "%s survived the run", p)
	}
	require.Contains(t, e.Sim.AgentLog(id), "the runner user had what only a login gives; removed")
}
