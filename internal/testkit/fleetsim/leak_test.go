//go:build linux

package fleetsim

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
)

const testInstance = "i-0000000000000000a"

// runSim runs sim until the test ends; stop cancels it and waits for Run to return.
func runSim(t *testing.T, sim *Simulator) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Run(ctx) }()
	stop = func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(2 * time.Minute):
			t.Fatal("Run did not return within 2 minutes of its context ending")
		}
	}
	t.Cleanup(cancel)
	return stop
}

// requireTree checks that an instance's whole tree runs: the mock, the agent's shim, the agent,
// the runner in its own group and the job in its own group.
func requireTree(t *testing.T, sim *Simulator, dir, id string) {
	t.Helper()
	runner, job := readyPIDs(t, filepath.Join(dir, id))
	procs := strings.Join(procsUnder(dir), "\n")
	agent := sim.AgentPID(id)
	require.NotZero(t, agent)
	for _, pid := range []int{agent, runner, job} {
		require.Contains(t, procs, "pid "+strconv.Itoa(pid)+" ", "not running; processes:\n%s", procs)
	}
	require.Equal(t, 1, countUnder(dir, "imds.json"), "one metadata mock; processes:\n%s", procs)
	require.Len(t, procsUnder(dir), 5, "mock, shim, agent, runner, job; processes:\n%s", procs)
	pgid, err := syscall.Getpgid(runner)
	require.NoError(t, err)
	require.NotEqual(t, agent, pgid, "the runner has a process group of its own, as with the real agent")
}

// waitGone waits until nothing runs under dir any more, and fails the test with what is left.
func waitGone(t *testing.T, dir, when string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Empty(c, procsUnder(dir), "processes left %s", when)
	}, time.Minute, 20*time.Millisecond)
}

func TestRunThenCancelLeavesNoProcess(t *testing.T) {
	testbed.RequireRoot(t, "makes the simulator's cgroups")
	bin, dir := t.TempDir(), simDir(t)
	imds, _, _ := scripts(t, bin)
	reapOnFailure(t, dir)
	sim, err := newTestSimulator(dir, imds, "", newFakeEC2(testInstance), nil)
	require.NoError(t, err)
	// Weighed as a benchmark weighs its instances (Config.CPUShares), where the machine can.
	sim.cfg.CPUShares = 256
	sim.cpuGroup, err = newCPUGroup(sim.cgroupBase, sim.cfg.CPUShares)
	require.NoError(t, err)
	stop := runSim(t, sim)
	requireTree(t, sim, dir, testInstance)
	require.Equal(t, []string{testInstance}, sim.Running())
	require.DirExists(t, filepath.Join(sim.cgroupBase, testInstance), "the instance's cgroup root")
	if mount, err := cpuMountPoint(); err == nil && mount != "" && sim.cfg.CPUShares > 0 {
		// The agent and what it started weigh as one process on the CPU (see cpu_linux.go).
		require.NotEmpty(t, sim.cpuGroup, "a cgroup v1 cpu controller is mounted at %s", mount)
		procs, err := os.ReadFile(filepath.Join(sim.cpuGroup, "cgroup.procs"))
		require.NoError(t, err)
		runner, job := readyPIDs(t, filepath.Join(dir, testInstance))
		for _, pid := range []int{sim.AgentPID(testInstance), runner, job} {
			require.Contains(t, strings.Fields(string(procs)), strconv.Itoa(pid), "not in the instances' cpu cgroup %s", sim.cpuGroup)
		}
		shares, err := os.ReadFile(filepath.Join(sim.cpuGroup, "cpu.shares"))
		require.NoError(t, err)
		require.Equal(t, strconv.Itoa(sim.cfg.CPUShares), strings.TrimSpace(string(shares)))
	}

	stop()
	require.NoDirExists(t, sim.cgroupBase, "Run returned with the simulator's cgroups left")
	if sim.cpuGroup != "" {
		require.NoDirExists(t, sim.cpuGroup, "Run returned with the instances' cpu cgroup left")
	}

	require.Empty(t, procsUnder(dir), "Run returned with processes left")
}

func TestStoppedInstanceTakesItsWholeTreeAlongAndRestartsClean(t *testing.T) {
	testbed.RequireRoot(t, "makes the simulator's cgroups")
	bin, dir := t.TempDir(), simDir(t)
	imds, _, _ := scripts(t, bin)
	reapOnFailure(t, dir)
	ec2 := newFakeEC2(testInstance)
	sim, err := newTestSimulator(dir, imds, "", ec2, nil)
	require.NoError(t, err)
	stop := runSim(t, sim)
	defer stop()
	requireTree(t, sim, dir, testInstance)

	// A stop: SIGTERM to the agent, which exits leaving its runner and the runner's job.
	ec2.set(testInstance, ec2types.InstanceStateNameStopped)
	waitGone(t, dir, "after a stop")
	require.Empty(t, sim.Running())
	require.ErrorContains(t, sim.Interrupt(context.Background(), testInstance), "not running")
	require.Empty(t, procsUnder(dir), "an interruption of a stopped instance started a mock")

	// Started again: one tree, with one mock.
	require.NoError(t, os.Remove(filepath.Join(dir, testInstance, readyFile)))
	ec2.set(testInstance, ec2types.InstanceStateNameRunning)
	requireTree(t, sim, dir, testInstance)

	// A spot notice restarts the mock: still one.
	require.NoError(t, sim.Interrupt(context.Background(), testInstance))
	require.Equal(t, 1, countUnder(dir, "imds.json"))
	require.Contains(t, strings.Join(procsUnder(dir), "\n"), "--mock-trigger-time 20", "restarted with a notice time")

	// A process in the instance's cgroups that is none of the shim's descendants (a run's daemon
	// that a user namespace hid from everything else) ends with the instance, and so do its cgroups.
	cg := filepath.Join(sim.cgroupBase, testInstance)
	hidden := startInCgroup(t, filepath.Join(cg, "jobs", "run-1"))

	// A termination: a power cut.
	ec2.set(testInstance, ec2types.InstanceStateNameTerminated)
	waitGone(t, dir, "after a termination")
	require.Empty(t, sim.Running())
	select {
	case <-hidden:
	case <-time.After(time.Minute):
		t.Fatal("the process in the instance's cgroup outlived the instance")
	}
	require.NoDirExists(t, cg, "the instance's cgroups outlived it")
}

// startInCgroup starts a sleep directly in the cgroup dir (made here) and returns a channel
// closed once it has exited.
func startInCgroup(t *testing.T, dir string) <-chan struct{} {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	f, err := os.Open(dir)
	require.NoError(t, err)
	defer f.Close()
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd())}
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	return done
}

func TestFailedAgentStartStopsTheMetadataMock(t *testing.T) {
	testbed.RequireRoot(t, "makes the simulator's cgroups")
	bin, dir := t.TempDir(), simDir(t)
	imds, _, _ := scripts(t, bin)
	reapOnFailure(t, dir)
	var log testbed.Buffer
	sim, err := newTestSimulator(dir, imds, filepath.Join(bin, "no-such-agent"), newFakeEC2(testInstance), &log)
	require.NoError(t, err)
	sim.cfg.Interval = time.Hour // one attempt only
	stop := runSim(t, sim)
	defer stop()

	<-sim.Ready() // the first look at EC2 has tried to start the instance

	require.Contains(t, log.String(), "fleetsim: start instance")
	require.Contains(t, log.String(), "the agent did not start")
	require.Contains(t, metadataLog(t, filepath.Join(dir, testInstance)), "fake metadata mock listening",
		"the mock never ran: the test proves nothing")
	require.Empty(t, sim.Running())
	require.Empty(t, procsUnder(dir), "the mock is left running")
}

func TestSimulatorKilledLeavesNoProcess(t *testing.T) {
	testbed.RequireRoot(t, "makes the simulator's cgroups")
	bin := t.TempDir()
	imds, _, _ := scripts(t, bin)
	for _, tc := range []struct{ name, metadataBin string }{
		{"fake metadata mock", imds},
		{"amazon-ec2-metadata-mock", os.Getenv("HANGAR_TESTBED_IMDS_BIN")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.metadataBin == "" {
				t.Skip("HANGAR_TESTBED_IMDS_BIN is not set: make testbed-up and load .cache/testbed/endpoints.env")
			}
			dir := simDir(t)
			reapOnFailure(t, dir)
			self, err := os.Executable()
			require.NoError(t, err)
			var out testbed.Buffer
			child := exec.Command(self)
			child.Env = append(os.Environ(), helperEnv+"=sim", helperDirEnv+"="+dir, helperIMDSEnv+"="+tc.metadataBin)
			child.Stdout, child.Stderr = &out, &out
			require.NoError(t, child.Start())
			t.Cleanup(func() {
				_ = child.Process.Kill()
				_ = child.Wait()
				if t.Failed() {
					t.Logf("simulator output:\n%s", out.String())
				}
			})
			runner, job := readyPIDs(t, filepath.Join(dir, testInstance))
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				assert.Len(c, procsUnder(dir), 5, "mock, shim, agent, runner and job")
			}, time.Minute, 20*time.Millisecond)
			procs := strings.Join(procsUnder(dir), "\n")
			require.Contains(t, procs, "pid "+strconv.Itoa(runner)+" ")
			require.Contains(t, procs, "pid "+strconv.Itoa(job)+" ")

			require.NoError(t, child.Process.Signal(syscall.SIGKILL))
			_ = child.Wait()

			waitGone(t, dir, "after the simulator was killed")
		})
	}
}
