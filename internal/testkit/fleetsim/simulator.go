package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hangar-ci/hangar/pkg/fleet"
)

// EC2 is the part of the EC2 client the simulator uses.
type EC2 interface {
	DescribeInstances(ctx context.Context, params *ec2.DescribeInstancesInput, optFns ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	TerminateInstances(ctx context.Context, params *ec2.TerminateInstancesInput, optFns ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
}

// Config says what to run and where.
type Config struct {
	// Stack: only instances tagged hangar:stack=Stack are simulated.
	Stack string
	// AgentBin and MetadataBin are the agent and amazon-ec2-metadata-mock binaries.
	AgentBin, MetadataBin string
	// Dir holds one directory per instance (runner, work, logs).
	Dir string
	// Env is the agents' environment (AWS credentials, region, endpoints); the simulator adds
	// the metadata and DynamoDB endpoints of each instance.
	Env []string
	// DynamoDBEndpoint is where the per-instance proxies forward to.
	DynamoDBEndpoint string
	// Region and Account are served in the identity documents.
	Region, Account string
	// AgentArgs are extra agent flags (--poll-interval, say).
	AgentArgs []string
	// Prepare, when set, runs before an instance's first agent start (to bake a runner into
	// the "image", say).
	Prepare func(instanceID, runnerDir string) error
	// Interval is how often EC2 is looked at (default 200ms).
	Interval time.Duration
	Log      *slog.Logger
}

type instance struct {
	id, pool, dir string
	ident         identity
	md            *metadataMock
	proxy         *ddbProxy
	agent         *exec.Cmd
	agentDone     chan struct{}
	prepared      bool
}

// Simulator runs agents for simulated instances. Create with New, then Run.
type Simulator struct {
	cfg   Config
	ec2   EC2
	mu    sync.Mutex
	insts map[string]*instance
	ready chan struct{} // closed after the first reconcile
	once  sync.Once
}

// New returns a simulator.
func New(cfg Config, client EC2) (*Simulator, error) {
	if cfg.Stack == "" || cfg.AgentBin == "" || cfg.MetadataBin == "" || cfg.Dir == "" || cfg.DynamoDBEndpoint == "" {
		return nil, errors.New("fleetsim: Stack, AgentBin, MetadataBin, Dir and DynamoDBEndpoint are required")
	}
	if cfg.Interval == 0 {
		cfg.Interval = 200 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Simulator{cfg: cfg, ec2: client, insts: map[string]*instance{}, ready: make(chan struct{})}, nil
}

// Run simulates until ctx ends, then stops every agent and mock.
func (s *Simulator) Run(ctx context.Context) error {
	defer s.stopAll()
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

func (s *Simulator) reconcile(ctx context.Context) error {
	p := ec2.NewDescribeInstancesPaginator(s.ec2, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:" + fleet.TagStack), Values: []string{s.cfg.Stack}},
	}})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, r := range page.Reservations {
			for _, in := range r.Instances {
				s.apply(ctx, in, aws.ToString(r.OwnerId))
			}
		}
	}
	return nil
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
	running := in.State != nil && (in.State.Name == ec2types.InstanceStateNameRunning || in.State.Name == ec2types.InstanceStateNamePending)
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
	}
}

func (s *Simulator) start(ctx context.Context, inst *instance) error {
	runnerDir := filepath.Join(inst.dir, "runner")
	if err := os.MkdirAll(runnerDir, 0o755); err != nil {
		return err
	}
	if !inst.prepared && s.cfg.Prepare != nil {
		if err := s.cfg.Prepare(inst.id, runnerDir); err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
	}
	inst.prepared = true
	var err error
	if inst.md, err = startMetadata(ctx, s.cfg.MetadataBin, inst.dir, inst.ident); err != nil {
		return err
	}
	if inst.proxy == nil {
		if inst.proxy, err = newProxy(s.cfg.DynamoDBEndpoint); err != nil {
			return err
		}
	}
	logf, err := os.OpenFile(filepath.Join(inst.dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := append([]string{"--stack", s.cfg.Stack, "--pool", inst.pool, "--runner-dir", runnerDir,
		"--work-dir", filepath.Join(inst.dir, "work"), "--run-as", "self", "--log-format", "json",
		"--shutdown-command", "touch " + filepath.Join(inst.dir, "poweroff")}, s.cfg.AgentArgs...)
	cmd := exec.Command(s.cfg.AgentBin, args...)
	cmd.Env = append(slices.Clone(s.cfg.Env), "AWS_EC2_METADATA_SERVICE_ENDPOINT="+inst.md.url(),
		"AWS_ENDPOINT_URL_DYNAMODB="+inst.proxy.url())
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = inst.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // so that a "power cut" takes the runner too
	if err := cmd.Start(); err != nil {
		inst.md.stop()
		return fmt.Errorf("start agent: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	inst.agent, inst.agentDone = cmd, done
	s.cfg.Log.Info("fleetsim: agent started", "instance", inst.id, "pool", inst.pool, "pid", cmd.Process.Pid)
	return nil
}

// stop ends an instance's agent: gracefully (SIGTERM, as systemd does on a stop) or at once (a
// terminated machine), with its whole process group.
func (s *Simulator) stop(inst *instance, graceful bool) {
	pgid := inst.agent.Process.Pid
	if graceful {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-inst.agentDone:
		case <-time.After(10 * time.Second):
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-inst.agentDone
	inst.agent = nil
	inst.md.stop()
	s.cfg.Log.Info("fleetsim: agent stopped", "instance", inst.id, "graceful", graceful)
}

func (s *Simulator) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, inst := range s.insts {
		if inst.agent != nil {
			s.stop(inst, false)
		}
		if inst.proxy != nil {
			inst.proxy.close()
		}
	}
}
