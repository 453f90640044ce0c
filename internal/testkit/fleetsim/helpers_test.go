//go:build linux

package fleetsim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// The test binary plays every process the simulator starts, chosen by helperEnv: the metadata
// mock ("imds", or "imds-silent", which never answers), the agent ("agent"), which starts a
// runner in a process group of its own as the real agent does ("runner"), which starts a job
// ("job"); and, for the parent-death test, a whole simulator ("sim").
const (
	helperEnv     = "FLEETSIM_TEST_HELPER"
	helperDirEnv  = "FLEETSIM_TEST_DIR"  // the "sim" helper's directory
	helperIMDSEnv = "FLEETSIM_TEST_IMDS" // the "sim" helper's metadata binary

	testStack = "fleetsim-test"
	// readyFile is what the stand-in runner writes into its instance's directory once it and its
	// job run: their pids.
	readyFile = "ready"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		syscall.Exit(runHelper(mode, os.Args[1:])) // without -race's second of delay at exit
	}
	os.Exit(m.Run())
}

func runHelper(mode string, args []string) int {
	var err error
	switch mode {
	case "imds":
		err = fakeMetadata(args)
	case "imds-silent":
		fmt.Println("silent metadata mock started")
		waitForSignal()
	case "agent":
		err = fakeAgent()
	case "runner":
		err = fakeRunner()
	case "job":
		waitForSignal()
	case "sim":
		err = runSimulator()
	default:
		err = fmt.Errorf("unknown helper %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper", mode+":", err)
		return 1
	}
	return 0
}

// waitForSignal blocks until SIGTERM or SIGINT.
func waitForSignal() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}

// fakeMetadata answers IMDSv2 token requests on the port given with -p, as the mock does.
func fakeMetadata(args []string) error {
	i := slices.Index(args, "-p")
	if i < 0 || i+1 >= len(args) {
		return fmt.Errorf("no -p in %q", args)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+args[i+1])
	if err != nil {
		return err
	}
	fmt.Println("fake metadata mock listening on", ln.Addr())
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut && r.URL.Path == "/latest/api/token" {
				_, _ = io.WriteString(w, "token")
				return
			}
			http.NotFound(w, r)
		}))
	}()
	waitForSignal()
	return nil
}

// helperCommand runs this test binary as another helper.
func helperCommand(mode string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd, nil
}

// fakeAgent starts a runner in the runner directory and a process group of its own, as the agent
// does, and on SIGTERM exits without stopping it: whatever the agent leaves, the simulator must
// clean up.
func fakeAgent() error {
	runner, err := helperCommand("runner")
	if err != nil {
		return err
	}
	runner.Dir = "runner"
	runner.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := runner.Start(); err != nil {
		return err
	}
	waitForSignal()
	return nil
}

// fakeRunner starts a job in the work directory, in a process group of its own, then writes its
// and the job's pids to the instance's readyFile.
func fakeRunner() error {
	if err := os.MkdirAll("../work", 0o755); err != nil {
		return err
	}
	job, err := helperCommand("job")
	if err != nil {
		return err
	}
	job.Dir = "../work"
	job.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := job.Start(); err != nil {
		return err
	}
	if err := os.WriteFile("../"+readyFile, fmt.Appendf(nil, "%d %d\n", os.Getpid(), job.Process.Pid), 0o644); err != nil {
		return err
	}
	waitForSignal()
	return nil
}

// runSimulator runs a simulator of one instance in $FLEETSIM_TEST_DIR until the process is killed.
func runSimulator() error {
	sim, err := newTestSimulator(os.Getenv(helperDirEnv), os.Getenv(helperIMDSEnv), "", newFakeEC2("i-0000000000000000a"), nil)
	if err != nil {
		return err
	}
	return sim.Run(context.Background())
}

// newTestSimulator returns a simulator whose agent is this test binary (helper "agent", unless
// agentBin is given).
func newTestSimulator(dir, metadataBin, agentBin string, client EC2, log io.Writer) (*Simulator, error) {
	env := append(os.Environ(), helperEnv+"=agent")
	if agentBin == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		agentBin = self
	}
	if log == nil {
		log = os.Stderr
	}
	return New(Config{
		Stack: testStack, AgentBin: agentBin, MetadataBin: metadataBin, Dir: dir, Env: env,
		DynamoDBEndpoint: "http://127.0.0.1:1", Region: "us-east-1", Account: "123456789012",
		Interval: 50 * time.Millisecond, Log: slog.New(slog.NewTextHandler(log, nil)),
	}, client)
}

// fakeEC2 serves instances of testStack in the states the test sets.
type fakeEC2 struct {
	mu     sync.Mutex
	states map[string]ec2types.InstanceStateName
}

func newFakeEC2(running ...string) *fakeEC2 {
	f := &fakeEC2{states: map[string]ec2types.InstanceStateName{}}
	for _, id := range running {
		f.states[id] = ec2types.InstanceStateNameRunning
	}
	return f
}

func (f *fakeEC2) set(id string, state ec2types.InstanceStateName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states[id] = state
}

func (f *fakeEC2) DescribeInstances(_ context.Context, in *ec2.DescribeInstancesInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var insts []ec2types.Instance
	for id, state := range f.states {
		if len(in.InstanceIds) > 0 && !slices.Contains(in.InstanceIds, id) {
			continue
		}
		insts = append(insts, ec2types.Instance{
			InstanceId: aws.String(id), State: &ec2types.InstanceState{Name: state}, InstanceType: ec2types.InstanceTypeC7iLarge,
			Placement: &ec2types.Placement{AvailabilityZone: aws.String("us-east-1a")},
			Tags:      []ec2types.Tag{{Key: aws.String(fleet.TagStack), Value: aws.String(testStack)}, {Key: aws.String(fleet.TagPool), Value: aws.String("linux-x64")}},
		})
	}
	return &ec2.DescribeInstancesOutput{Reservations: []ec2types.Reservation{{OwnerId: aws.String("123456789012"), Instances: insts}}}, nil
}

func (f *fakeEC2) DescribeInstanceStatus(_ context.Context, in *ec2.DescribeInstanceStatusInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstanceStatusOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &ec2.DescribeInstanceStatusOutput{}
	for _, id := range in.InstanceIds {
		if state, ok := f.states[id]; ok {
			out.InstanceStatuses = append(out.InstanceStatuses, ec2types.InstanceStatus{InstanceId: aws.String(id), InstanceState: &ec2types.InstanceState{Name: state}})
		}
	}
	return out, nil
}

// DescribeTags gives every instance's stack tag: all are testStack's.
func (f *fakeEC2) DescribeTags(_ context.Context, _ *ec2.DescribeTagsInput, _ ...func(*ec2.Options)) (*ec2.DescribeTagsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &ec2.DescribeTagsOutput{}
	for id := range f.states {
		out.Tags = append(out.Tags, ec2types.TagDescription{ResourceId: aws.String(id), ResourceType: ec2types.ResourceTypeInstance,
			Key: aws.String(fleet.TagStack), Value: aws.String(testStack)})
	}
	return out, nil
}

func (f *fakeEC2) TerminateInstances(_ context.Context, in *ec2.TerminateInstancesInput, _ ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error) {
	for _, id := range in.InstanceIds {
		f.set(id, ec2types.InstanceStateNameTerminated)
	}
	return &ec2.TerminateInstancesOutput{}, nil
}

// scripts writes the metadata "binaries" into dir: imds (answers), silent (never answers), and
// exits (exits at once). Write them before starting processes: a binary being written cannot be
// executed (ETXTBSY).
func scripts(t *testing.T, dir string) (imds, silent, exits string) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755))
		return p
	}
	quoted := "'" + strings.ReplaceAll(self, "'", `'\''`) + "'"
	return write("imds", helperEnv+"=imds exec "+quoted+` "$@"`),
		write("imds-silent", helperEnv+"=imds-silent exec "+quoted+` "$@"`),
		write("imds-exits", "exit 3")
}

// procsUnder describes what runs under dir (see ProcessesUnder).
func procsUnder(dir string) []string { return ProcessesUnder(dir) }

// countUnder counts the processes under dir whose command line contains s.
func countUnder(dir, s string) int {
	n := 0
	for _, p := range procsUnder(dir) {
		if strings.Contains(p, s) {
			n++
		}
	}
	return n
}

// reapOnFailure kills, when the test ends, whatever it left running under dir, so that a
// failing test does not leak what it reports.
func reapOnFailure(t *testing.T, dir string) {
	t.Cleanup(func() {
		for _, p := range procsUnder(dir) {
			var pid int
			if _, err := fmt.Sscanf(p, "pid %d", &pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

// readyPIDs waits for an instance's readyFile and returns the runner's and the job's pids.
func readyPIDs(t *testing.T, instDir string) (runner, job int) {
	t.Helper()
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(instDir, readyFile))
		if err != nil {
			return false
		}
		_, err = fmt.Sscanf(string(b), "%d %d", &runner, &job)
		return err == nil
	}, 60*time.Second, 20*time.Millisecond, "the stand-in runner and its job never started")
	return runner, job
}

// simDir is a temporary Dir for a simulator that the runners' unprivileged users can reach
// (t.TempDir's parent is closed to them).
func simDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(d), 0o755))
	return d
}
