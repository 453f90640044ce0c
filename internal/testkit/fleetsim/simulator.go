package fleetsim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hangar-ci/hangar/internal/testkit/awsproxy"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// EC2 is the part of the EC2 client the simulator uses.
type EC2 interface {
	DescribeInstances(ctx context.Context, params *ec2.DescribeInstancesInput, optFns ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	DescribeInstanceStatus(ctx context.Context, params *ec2.DescribeInstanceStatusInput, optFns ...func(*ec2.Options)) (*ec2.DescribeInstanceStatusOutput, error)
	DescribeTags(ctx context.Context, params *ec2.DescribeTagsInput, optFns ...func(*ec2.Options)) (*ec2.DescribeTagsOutput, error)
	TerminateInstances(ctx context.Context, params *ec2.TerminateInstancesInput, optFns ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
}

// Config says what to run and where.
type Config struct {
	// Stack: only instances tagged hangar:stack=Stack are simulated.
	Stack string
	// AgentBin and MetadataBin are the agent and amazon-ec2-metadata-mock binaries.
	AgentBin, MetadataBin string
	// HelperBin is the agent's helper (cmd/agent/runas), given as --helper; empty: the agent
	// finds none beside it and starts its own binary instead.
	HelperBin string
	// Dir holds one directory per instance (runner, work, logs).
	Dir string
	// Env is the agents' environment (AWS credentials, region, endpoints); the simulator adds
	// the metadata and DynamoDB endpoints of each instance.
	Env []string
	// DynamoDBEndpoint is where the per-instance proxies forward to.
	DynamoDBEndpoint string
	// SQSEndpoint is where each agent's doorbell requests go, through a counting proxy of its
	// own (default: the AWS_ENDPOINT_URL of Env).
	SQSEndpoint string
	// Region and Account are served in the identity documents.
	Region, Account string
	// AgentArgs are extra agent flags (--poll-interval, say).
	AgentArgs []string
	// Prepare, when set, runs before an instance's first agent start (to bake a runner into
	// the "image", say).
	Prepare func(instanceID, runnerDir string) error
	// Interval is how often EC2 is looked at (default 200ms).
	Interval time.Duration
	// CPUShares, when set, runs the instances together in a cgroup of that CPU weight (cgroup v1
	// cpu.shares; a process's is 1024), where the machine has that controller: see cpu_linux.go.
	CPUShares int
	// Hide are files the instances' "image" lacks (a program, a library, a kernel file such as a
	// cgroup's cgroup.kill): each agent runs in a mount namespace of its own where they are
	// covered, as an image without them would have them missing.
	Hide []string
	Log  *slog.Logger
}

type instance struct {
	id, pool, dir string
	ident         identity
	md            *metadataMock   // nil while the agent is not running
	proxy         *awsproxy.Proxy // the agent's DynamoDB traffic, counted and recorded; kept across restarts, closed by stopAll
	sqsProxy      *awsproxy.Proxy // the agent's SQS (doorbell) traffic; likewise
	agent         *exec.Cmd       // the agent's shim (see shimEnv); nil while not running
	agentDone     <-chan struct{}
	agentPID      int
	prepared      bool
	user          *runnerUser // lent for the instance's life (stop and start keep it)
	cgroup        string      // the agent's --cgroup-root, for the instance's life; "" until first started
}

// Simulator runs agents for simulated instances. Create with New, then Run.
type Simulator struct {
	cfg   Config
	ec2   EC2
	self  string // this program, run as the agents' shim
	mu    sync.Mutex
	insts map[string]*instance
	ready chan struct{} // closed after the first reconcile
	once  sync.Once
	// cgroupMount is the cgroup2 mount; cgroupBase this simulator's directory below it, holding
	// one cgroup root per instance (see cgroup_linux.go).
	cgroupMount, cgroupBase string
	// cpuGroup is the cgroup of lower CPU weight every agent runs in ("" where there is none; see
	// cpu_linux.go).
	cpuGroup string
}

// New returns a simulator.
func New(cfg Config, client EC2) (*Simulator, error) {
	if cfg.Stack == "" || cfg.AgentBin == "" || cfg.MetadataBin == "" || cfg.Dir == "" || cfg.DynamoDBEndpoint == "" {
		return nil, errors.New("fleetsim: Stack, AgentBin, MetadataBin, Dir and DynamoDBEndpoint are required")
	}
	// The instances' runner users (unprivileged) must reach their runs' directories below Dir.
	if err := os.Chmod(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("fleetsim: %w", err)
	}
	for d := filepath.Dir(filepath.Clean(cfg.Dir)); ; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err == nil && st.Mode().Perm()&0o001 == 0 {
			return nil, fmt.Errorf("fleetsim: %s (above Dir %s) is closed to other users (mode %s): the runners' unprivileged users must reach their directories",
				d, cfg.Dir, st.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	if cfg.Interval == 0 {
		cfg.Interval = 200 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("fleetsim: find this program, to run agents under it: %w", err)
	}
	mount, base, err := newCgroupBase()
	if err != nil {
		return nil, fmt.Errorf("fleetsim: %w", err)
	}
	var cpu string
	if cfg.CPUShares > 0 {
		if cpu, err = newCPUGroup(base, cfg.CPUShares); err != nil {
			cfg.Log.Warn("fleetsim: the instances share the CPU at full weight", "error", err)
		}
	}
	return &Simulator{cfg: cfg, ec2: client, self: self, insts: map[string]*instance{}, ready: make(chan struct{}),
		cgroupMount: mount, cgroupBase: base, cpuGroup: cpu}, nil
}

// Run simulates until ctx ends, then stops every agent and mock and returns once every process
// it started has exited. Should the simulator's process die first, its agents and mocks die with
// it (a parent-death signal), the agents' runners and scripts too (see shimEnv).
func (s *Simulator) Run(ctx context.Context) error {
	defer func() {
		s.stopAll()
		if err := removeCgroupTree(s.cgroupMount, s.cgroupBase); err != nil {
			s.cfg.Log.Warn("fleetsim: remove the simulator's cgroups", "error", err)
		}
		if err := removeCPUGroup(s.cpuGroup); err != nil {
			s.cfg.Log.Warn("fleetsim: remove the simulator's cgroups", "error", err)
		}
	}()
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if err := s.reconcile(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("fleetsim: look at EC2", "error", err)
		}
		s.once.Do(func() { close(s.ready) })
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// reconcile looks at the stack's instances in EC2 and brings each one's simulation in line. The
// look is cheap, as it runs five times a second beside the code under test: the stack's instance
// ids from their tags, their states, and a whole description only of instances new to the
// simulator (moto serializes a described instance in some 2 ms of its one interpreter, a state
// in a fraction of that; described whole, forty instances held every other request of the
// emulator back a third of the time).
func (s *Simulator) reconcile(ctx context.Context) error {
	var ids []string
	tags := ec2.NewDescribeTagsPaginator(s.ec2, &ec2.DescribeTagsInput{Filters: []ec2types.Filter{
		{Name: aws.String("resource-type"), Values: []string{"instance"}},
		{Name: aws.String("key"), Values: []string{fleet.TagStack}},
		{Name: aws.String("value"), Values: []string{s.cfg.Stack}},
	}})
	for tags.HasMorePages() {
		page, err := tags.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, t := range page.Tags {
			ids = append(ids, aws.ToString(t.ResourceId))
		}
	}
	states := map[string]ec2types.InstanceStateName{}
	for chunk := range slices.Chunk(ids, 100) {
		st := ec2.NewDescribeInstanceStatusPaginator(s.ec2, &ec2.DescribeInstanceStatusInput{InstanceIds: chunk, IncludeAllInstances: aws.Bool(true)})
		for st.HasMorePages() {
			page, err := st.NextPage(ctx)
			if err != nil {
				return err
			}
			for _, is := range page.InstanceStatuses {
				if is.InstanceState != nil {
					states[aws.ToString(is.InstanceId)] = is.InstanceState.Name
				}
			}
		}
	}
	var unknown []string
	s.mu.Lock()
	for _, id := range ids {
		if s.insts[id] == nil && up(states[id]) {
			unknown = append(unknown, id)
		}
	}
	s.mu.Unlock()
	for chunk := range slices.Chunk(unknown, 100) {
		out, err := s.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: chunk})
		if err != nil {
			return err
		}
		for _, r := range out.Reservations {
			for _, in := range r.Instances {
				s.apply(ctx, in, aws.ToString(r.OwnerId))
			}
		}
	}
	for _, id := range ids {
		if !slices.Contains(unknown, id) {
			// An instance whose id is tagged but whose state EC2 no longer gives is gone.
			name, ok := states[id]
			if !ok {
				name = ec2types.InstanceStateNameTerminated
			}
			s.apply(ctx, ec2types.Instance{InstanceId: aws.String(id), State: &ec2types.InstanceState{Name: name}}, "")
		}
	}
	return nil
}

// up reports whether an instance in state st is up, or coming up.
func up(st ec2types.InstanceStateName) bool {
	return st == ec2types.InstanceStateNameRunning || st == ec2types.InstanceStateNamePending
}

func tag(in ec2types.Instance, key string) string {
	for _, t := range in.Tags {
		if aws.ToString(t.Key) == key {
			return aws.ToString(t.Value)
		}
	}
	return ""
}

// apply brings one instance's simulation in line with its EC2 state.
func (s *Simulator) apply(ctx context.Context, in ec2types.Instance, owner string) {
	id := aws.ToString(in.InstanceId)
	s.mu.Lock()
	defer s.mu.Unlock()
	inst := s.insts[id]
	running := in.State != nil && up(in.State.Name)
	if inst != nil && inst.agent != nil {
		if _, err := os.Stat(filepath.Join(inst.dir, "poweroff")); err == nil && running {
			// The agent powered the machine off; the launch template makes that a termination.
			_ = os.Remove(filepath.Join(inst.dir, "poweroff"))
			s.cfg.Log.Info("fleetsim: instance powered off; terminating it", "instance", id)
			if _, err := s.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
				s.cfg.Log.Warn("fleetsim: terminate powered-off instance", "instance", id, "error", err)
			}
			running = false
		}
	}
	switch {
	case running && (inst == nil || inst.agent == nil):
		if inst == nil {
			account := s.cfg.Account
			if account == "" {
				account = owner
			}
			lifecycle := "on-demand"
			if in.InstanceLifecycle == ec2types.InstanceLifecycleTypeSpot {
				lifecycle = "spot"
			}
			arch := "x86_64"
			if in.Architecture == ec2types.ArchitectureValuesArm64 {
				arch = "arm64"
			}
			az := ""
			if in.Placement != nil {
				az = aws.ToString(in.Placement.AvailabilityZone)
			}
			inst = &instance{id: id, pool: tag(in, fleet.TagPool), dir: filepath.Join(s.cfg.Dir, id), ident: identity{
				ID: id, Type: string(in.InstanceType), AZ: az, Region: s.cfg.Region, Account: account, Lifecycle: lifecycle, Arch: arch,
			}}
			s.insts[id] = inst
		}
		if err := s.start(ctx, inst); err != nil {
			s.cfg.Log.Error("fleetsim: start instance", "instance", id, "error", err)
		}
	case !running && inst != nil && inst.agent != nil:
		graceful := in.State != nil && (in.State.Name == ec2types.InstanceStateNameStopping || in.State.Name == ec2types.InstanceStateNameStopped)
		s.stop(inst, graceful)
		if !graceful {
			s.endCgroup(inst)
			inst.user.release() // terminated: the user may serve another instance
			inst.user = nil
		}
	}
}

// start starts an instance's metadata mock, DynamoDB proxy and agent. On error nothing of it
// runs.
func (s *Simulator) start(ctx context.Context, inst *instance) (err error) {
	runnerDir := filepath.Join(inst.dir, "runner")
	if err := os.MkdirAll(runnerDir, 0o755); err != nil {
		return fmt.Errorf("create runner dir: %w", err)
	}
	if !inst.prepared && s.cfg.Prepare != nil {
		if err := s.cfg.Prepare(inst.id, runnerDir); err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
	}
	inst.prepared = true
	if inst.md != nil { // not expected: stop keeps none; never leave one running unreferenced
		inst.md.stop()
		inst.md = nil
	}
	md, err := startMetadata(ctx, s.cfg.MetadataBin, inst.dir, inst.ident)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			md.stop()
		}
	}()
	if inst.proxy == nil {
		if inst.proxy, err = awsproxy.New(s.cfg.DynamoDBEndpoint, 0); err != nil {
			return fmt.Errorf("start DynamoDB proxy: %w", err)
		}
		inst.proxy.Record(recordedRequests)
	}
	if inst.sqsProxy == nil {
		if inst.sqsProxy, err = awsproxy.New(s.sqsEndpoint(), 0); err != nil {
			return fmt.Errorf("start SQS proxy: %w", err)
		}
	}
	if inst.user == nil {
		if inst.user, err = claimUser(); err != nil {
			return err
		}
	}
	if inst.cgroup == "" {
		cg := filepath.Join(s.cgroupBase, inst.id)
		if err := os.Mkdir(cg, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("make the instance's cgroup: %w", err)
		}
		inst.cgroup = cg
	}
	args := append([]string{"--stack", s.cfg.Stack, "--pool", inst.pool, "--runner-dir", runnerDir, "--cgroup-root", inst.cgroup,
		"--state-dir", filepath.Join(inst.dir, "state"), "--runs-dir", filepath.Join(inst.dir, "runs"),
		"--run-as", inst.user.name, "--log-format", "json", "--shared-kernel", "--walk-skip", os.Getenv("HANGAR_TESTBED_WALK_SKIP"),
		"--shutdown-command", "touch " + filepath.Join(inst.dir, "poweroff")}, s.cfg.AgentArgs...)
	if s.cfg.HelperBin != "" {
		args = append(args, "--helper", s.cfg.HelperBin)
	}
	env := append(slices.Clone(s.cfg.Env), "AWS_EC2_METADATA_SERVICE_ENDPOINT="+md.url(),
		"AWS_ENDPOINT_URL_DYNAMODB="+inst.proxy.URL(), "AWS_ENDPOINT_URL_SQS="+inst.sqsProxy.URL())
	if err := s.startAgent(inst, args, env); err != nil {
		return err
	}
	inst.md = md
	s.cfg.Log.Info("fleetsim: agent started", "instance", inst.id, "pool", inst.pool, "pid", inst.agentPID)
	return nil
}

// startAgent starts the agent under its shim (see shimEnv) in the instance's directory, and
// learns the agent's pid from the shim. On error neither runs.
func (s *Simulator) startAgent(inst *instance, args, env []string) error {
	logPath := filepath.Join(inst.dir, "agent.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open agent log: %w", err)
	}
	defer logf.Close()
	pidIn, pidOut, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start agent: %w", err)
	}
	defer pidIn.Close()
	cmd := exec.Command(s.self, append([]string{s.cfg.AgentBin}, args...)...)
	cmd.Env = append(env, shimEnv+"=1")
	if s.cpuGroup != "" {
		cmd.Env = append(cmd.Env, cpuShimEnv+"="+s.cpuGroup)
	}
	if len(s.cfg.Hide) > 0 {
		cmd.Env = append(cmd.Env, hideShimEnv+"="+strings.Join(s.cfg.Hide, string(os.PathListSeparator)))
	}
	cmd.ExtraFiles = []*os.File{pidOut} // descriptor 3
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = inst.dir
	// Its own process group, and a power cut (SIGHUP, see shimEnv) when the simulator dies.
	cmd.SysProcAttr = procAttr(true, syscall.SIGHUP)
	if len(s.cfg.Hide) > 0 {
		ownMounts(cmd.SysProcAttr)
	}
	done, err := startLocked(cmd)
	_ = pidOut.Close()
	if err != nil {
		return fmt.Errorf("start agent shim: %w", err)
	}
	pid, err := readPID(pidIn, 10*time.Second)
	if err != nil {
		halt(cmd, done, syscall.SIGHUP, 10*time.Second)
		return fmt.Errorf("start agent: %w; see %s", err, logPath)
	}
	inst.agent, inst.agentDone, inst.agentPID = cmd, done, pid
	return nil
}

// readPID reads the pid the shim writes once the agent has started; the shim closes the pipe
// without one when the agent could not start.
func readPID(r *os.File, timeout time.Duration) (int, error) {
	if err := r.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return 0, fmt.Errorf("read the agent's pid: %w", err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return 0, fmt.Errorf("read the agent's pid: %w", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return 0, errors.New("the agent did not start")
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil {
		return 0, fmt.Errorf("read the agent's pid: %w", err)
	}
	return pid, nil
}

// stop ends an instance's agent: gracefully (SIGTERM, as systemd does on a stop) or at once (a
// terminated machine), and with it every process the agent started (the shim's sweep), then its
// metadata mock.
func (s *Simulator) stop(inst *instance, graceful bool) {
	if graceful {
		_ = inst.agent.Process.Signal(syscall.SIGTERM) // the shim passes it on to the agent
		select {
		case <-inst.agentDone:
		case <-time.After(10 * time.Second):
		}
	}
	halt(inst.agent, inst.agentDone, syscall.SIGHUP, 30*time.Second) // a power cut, see shimEnv
	inst.agent, inst.agentDone, inst.agentPID = nil, nil, 0
	if inst.md != nil {
		inst.md.stop()
		inst.md = nil
	}
	s.cfg.Log.Info("fleetsim: agent stopped", "instance", inst.id, "graceful", graceful)
}

// stopAll stops every agent and mock, and closes every proxy, whether or not an instance's agent
// still runs.
func (s *Simulator) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, inst := range s.insts {
		if inst.agent != nil {
			s.stop(inst, false)
		}
		if inst.md != nil {
			inst.md.stop()
			inst.md = nil
		}
		if inst.sqsProxy != nil {
			inst.sqsProxy.Close()
			inst.sqsProxy = nil
		}
		if inst.proxy != nil {
			inst.proxy.Close()
			inst.proxy = nil
		}
		s.endCgroup(inst)
		inst.user.release()
		inst.user = nil
	}
}

// endCgroup kills whatever is left in the instance's cgroups and removes them (the instance
// ended: a machine's cgroups end with it).
func (s *Simulator) endCgroup(inst *instance) {
	if inst.cgroup == "" {
		return
	}
	if err := removeCgroupTree(s.cgroupMount, inst.cgroup); err != nil {
		s.cfg.Log.Warn("fleetsim: remove the instance's cgroups", "instance", inst.id, "error", err)
	}
	inst.cgroup = ""
}
