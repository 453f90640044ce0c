package fleetsim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hangar-ci/hangar/internal/testkit/awsproxy"
)

// Ready is closed once the simulator has looked at EC2 for the first time.
func (s *Simulator) Ready() <-chan struct{} { return s.ready }

func (s *Simulator) get(id string) (*instance, error) {
	inst, ok := s.insts[id]
	if !ok {
		return nil, fmt.Errorf("fleetsim: instance %s is not simulated", id)
	}
	return inst, nil
}

// Running returns the ids of instances whose agent runs.
func (s *Simulator) Running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, inst := range s.insts {
		if inst.agent != nil {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// AgentPID returns the pid of an instance's agent (0 when not running).
func (s *Simulator) AgentPID(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if inst, ok := s.insts[id]; ok && inst.agent != nil {
		return inst.agentPID
	}
	return 0
}

// Interrupt makes a running instance's metadata announce a spot interruption.
func (s *Simulator) Interrupt(ctx context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	inst, err := s.get(id)
	if err != nil {
		return err
	}
	if inst.md == nil {
		return fmt.Errorf("fleetsim: instance %s is not running", id)
	}
	if err := inst.md.interrupt(ctx); err != nil {
		return fmt.Errorf("fleetsim: interrupt %s: %w", id, err)
	}
	return nil
}

// SetDynamoDB makes DynamoDB reachable (up) or unreachable for one instance.
func (s *Simulator) SetDynamoDB(id string, up bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	inst, err := s.get(id)
	if err != nil {
		return err
	}
	inst.proxy.Cut(!up)
	return nil
}

// Request is one DynamoDB request an agent made: its operation (DynamoDB.UpdateItem) and body.
type Request = awsproxy.Request

// recordedRequests is how many of an instance's DynamoDB requests are kept for Requests.
const recordedRequests = 10000

// Requests returns the DynamoDB requests an instance's agents have made (the last 10,000).
func (s *Simulator) Requests(id string) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	if inst, ok := s.insts[id]; ok && inst.proxy != nil {
		return inst.proxy.Recorded()
	}
	return nil
}

// RequestCount returns how many DynamoDB requests an instance's agents have made.
func (s *Simulator) RequestCount(id string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if inst, ok := s.insts[id]; ok && inst.proxy != nil {
		return int64(awsproxy.Sum(inst.proxy.Counts()))
	}
	return 0
}

// sqsEndpoint is where the agents' SQS proxies forward to.
func (s *Simulator) sqsEndpoint() string {
	if s.cfg.SQSEndpoint != "" {
		return s.cfg.SQSEndpoint
	}
	for _, kv := range slices.Backward(s.cfg.Env) {
		if v, ok := strings.CutPrefix(kv, "AWS_ENDPOINT_URL="); ok {
			return v
		}
	}
	return os.Getenv("AWS_ENDPOINT_URL")
}

// SQSRequestCount returns how many SQS requests (the doorbell's) an instance's agents have made.
func (s *Simulator) SQSRequestCount(id string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if inst, ok := s.insts[id]; ok && inst.sqsProxy != nil {
		return int64(awsproxy.Sum(inst.sqsProxy.Counts()))
	}
	return 0
}

// SetSQS makes SQS (the doorbell) reachable (up) or unreachable for one instance.
func (s *Simulator) SetSQS(id string, up bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	inst, err := s.get(id)
	if err != nil {
		return err
	}
	if inst.sqsProxy == nil {
		return fmt.Errorf("fleetsim: %s has no agent running", id)
	}
	inst.sqsProxy.Cut(!up)
	return nil
}

// AgentLog returns what an instance's agents have logged.
func (s *Simulator) AgentLog(id string) string {
	b, _ := os.ReadFile(filepath.Join(s.cfg.Dir, id, "agent.log"))
	return string(b)
}

// RunsDir returns the parent of an instance's per-run directories (the agent's --runs-dir).
func (s *Simulator) RunsDir(id string) string { return filepath.Join(s.cfg.Dir, id, "runs") }

// RunnerDir returns an instance's runner install (the agent's --runner-dir).
func (s *Simulator) RunnerDir(id string) string { return filepath.Join(s.cfg.Dir, id, "runner") }

// RunnerUser returns the name of the unprivileged user an instance's runner runs as ("" when
// the instance never started).
func (s *Simulator) RunnerUser(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if inst, ok := s.insts[id]; ok && inst.user != nil {
		return inst.user.name
	}
	return ""
}

// MetadataURL returns the URL of an instance's metadata mock ("" while its agent is not running).
func (s *Simulator) MetadataURL(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if inst, ok := s.insts[id]; ok && inst.md != nil {
		return inst.md.url()
	}
	return ""
}

// CrashAgent kills an instance's agent at once, and everything it started with it (its runner,
// its jobs: systemd's default KillMode kills the unit's whole cgroup), then starts it again on
// the same machine, as systemd's Restart=always does: the restarted agent finds the instance as
// the crash left it.
func (s *Simulator) CrashAgent(ctx context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	inst, err := s.get(id)
	if err != nil {
		return err
	}
	if inst.agent == nil {
		return fmt.Errorf("fleetsim: the agent of %s does not run", id)
	}
	s.stop(inst, false)
	s.cfg.Log.Info("fleetsim: agent crashed; restarting it", "instance", id)
	return s.start(ctx, inst)
}
