package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// crashJob is run A's job: it crashes processes whose environment holds a secret, in its work
// directory and in its home, after trying to raise its core limit, and once after lowering it to
// 0 (the value a crash handler is still piped at).
const crashJob = `
grep 'core file' /proc/self/limits
if ulimit -c unlimited 2>/dev/null; then echo "raised=yes"; else echo "raised=no"; fi
cd "$HOME" && CRASH_SECRET="$SECRET" sh -c 'kill -SEGV $$'
cd /tmp && CRASH_SECRET="$SECRET" sh -c 'kill -ABRT $$'
(ulimit -c 0; cd /var/tmp && CRASH_SECRET="$SECRET" sh -c 'kill -QUIT $$')
for d in "$HOME" /tmp /var/tmp; do find "$d" -maxdepth 1 -name 'core*' -user "$(id -u)" | sed 's/^/core-left=/'; done
echo "crash job done"
`

// findSecretJob is run B's: it looks for run A's secret, and for any core file, in what the
// runner user owns where a crash of its processes would leave a core, and in the crash handlers'
// directories.
const findSecretJob = `
me=$(id -u)
for d in /tmp /var/tmp "$HOME" /dev/shm; do
  find "$d" -xdev -type f -user "$me" -exec grep -l -- "$SECRET" {} + 2>/dev/null | sed 's/^/secret-in=/'
  find "$d" -xdev -type f -user "$me" -name 'core*' 2>/dev/null | sed 's/^/core=/'
done
for d in /var/crash /var/lib/systemd/coredump; do
  grep -rls -- "$SECRET" "$d" 2>/dev/null | sed 's/^/secret-in=/'
  find "$d" -xdev -type f 2>/dev/null | sed 's/^/core=/'
done
echo "search done"
`

// TestCrashLeavesNothing: a job that crashes processes with a secret in their environment leaves
// no core (the helper's core limit holds it at 1 byte, which the job cannot raise), and the
// next run on the instance finds the secret nowhere it can read.
func TestCrashLeavesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.launch(time.Time{})
	in := e.warm(id)
	secret := "hangar-crash-secret-" + strings.TrimPrefix(id, "i-")

	claimed := e.claim(in, "4801")
	reg := e.waitSignal(id, state.SignalRegistered, "4801", claimed.Version)
	running := e.transition(state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: reg.Version, RunID: "4801"})
	done, err := e.GH.WaitJob(e.ctx, e.GH.QueueJob(repo, []string{"4801"}, "export SECRET="+secret+"\n"+crashJob))
	require.NoError(t, err)
	outA := done.Output
	require.Contains(t, outA, "crash job done", outA)
	require.Regexp(t, `Max core file size\s+1\s+1\s+bytes`, outA, "every process of the run has a core limit of 1 byte, soft and hard")
	require.Contains(t, outA, "raised=no", "which it cannot raise")
	require.NotContains(t, outA, "core-left=", "no core where the crashes ran:\n%s", outA)

	released := e.release(running)
	e.waitSignal(id, state.SignalDeregistered, "4801", released.Version)
	claimed = e.claim(e.must(e.Store.Get(e.ctx, id)), "4802")
	reg = e.waitSignal(id, state.SignalRegistered, "4802", claimed.Version)
	e.transition(state.Change{InstanceID: id, From: state.Claimed, To: state.Running, Version: reg.Version, RunID: "4802"})
	doneB, err := e.GH.WaitJob(e.ctx, e.GH.QueueJob(repo, []string{"4802"}, "export SECRET="+secret+"\n"+findSecretJob))
	require.NoError(t, err)
	outB := doneB.Output
	require.Contains(t, outB, "search done", outB)
	require.NotContains(t, outB, "secret-in=", "run B read run A's secret:\n%s", outB)
	require.NotContains(t, outB, "core=", "run B found a core:\n%s", outB)
	for _, d := range []string{"/tmp", "/var/tmp"} {
		cores, _ := filepath.Glob(filepath.Join(d, "core*"))
		for _, c := range cores {
			b, _ := os.ReadFile(c)
			require.NotContains(t, string(b), secret, "a core of run A in %s", c)
		}
	}
}
