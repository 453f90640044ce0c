package state

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
)

// State is the lifecycle state of an instance.
type State string

// The states of docs/design.md §3.
const (
	Created    State = "created"
	Idle       State = "idle"
	Claimed    State = "claimed"
	Running    State = "running"
	Stopped    State = "stopped"
	Terminated State = "terminated"
)

// States lists every state, non-terminal first.
var States = []State{Created, Idle, Claimed, Running, Stopped, Terminated}

// LiveStates lists the non-terminal states: the ones that carry a threshold.
var LiveStates = []State{Created, Idle, Claimed, Running, Stopped}

// Valid reports whether s is one of States.
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// ParseState returns the State named s, or an error naming the accepted values.
func ParseState(s string) (State, error) {
	if st := State(s); st.Valid() {
		return st, nil
	}
	return "", fmt.Errorf("unknown state %q: want one of created, idle, claimed, running, stopped, terminated", s)
}

// SignalName is a fact the agent reports about itself (docs/design.md §4).
type SignalName string

// The agent's signals.
const (
	SignalReady           SignalName = "READY"
	SignalRegistered      SignalName = "REGISTERED"
	SignalRegisterFailed  SignalName = "REGISTER_FAILED"
	SignalDeregistered    SignalName = "DEREGISTERED"
	SignalFailed          SignalName = "FAILED"
	SignalSpotInterrupted SignalName = "SPOT_INTERRUPTED"
)

// runSignals are the signals that are about one run and must name it.
var runSignals = map[SignalName]bool{SignalRegistered: true, SignalRegisterFailed: true, SignalDeregistered: true}

// Valid reports whether n is a known signal.
func (n SignalName) Valid() bool {
	switch n {
	case SignalReady, SignalRegistered, SignalRegisterFailed, SignalDeregistered, SignalFailed, SignalSpotInterrupted:
		return true
	}
	return false
}

// Usage classes of an instance.
const (
	UsageSpot     = "spot"
	UsageOnDemand = "on-demand"
)

// Spec describes what an instance is; it is fixed at launch.
type Spec struct {
	InstanceType string `dynamodbav:"instanceType,omitempty"`
	UsageClass   string `dynamodbav:"usageClass,omitempty"`
	AZ           string `dynamodbav:"az,omitempty"`
	VCPU         int    `dynamodbav:"vcpu,omitempty"`
	MemoryMiB    int    `dynamodbav:"memoryMiB,omitempty"`
	SpecHash     string `dynamodbav:"specHash,omitempty"`
	// Price is the instance's hourly price in US dollars when it was launched, and PriceSource
	// where it came from (PriceSpot, PriceOnDemand); both empty when no price could be had
	// ("price unknown": Hangar never invents one).
	Price       float64 `dynamodbav:"price,omitempty"`
	PriceSource string  `dynamodbav:"priceSource,omitempty"`
}

// Price sources.
const (
	PriceSpot     = "spot price history"
	PriceOnDemand = "price list"
)

// Assignment is what an instance needs to serve a run; it is set when the instance is claimed (or
// created for a run) and removed when the run gives it back.
type Assignment struct {
	RunID      string `dynamodbav:"runId,omitempty"`
	RunAttempt int    `dynamodbav:"runAttempt,omitempty"`
	// AssignedAt is when the run got the instance (its claim, or its creation for the run);
	// Claimed says it came warm from the pool; RegisteredAt is when it moved to running. The
	// store sets them; they end with the assignment, in the run's history record (RunRecord).
	AssignedAt   time.Time `dynamodbav:"assignedAt,omitempty"`
	Claimed      bool      `dynamodbav:"claimed,omitempty"`
	RegisteredAt time.Time `dynamodbav:"registeredAt,omitempty"`
	Repo         string    `dynamodbav:"repo,omitempty"`
	RunnerURL    string    `dynamodbav:"runnerUrl,omitempty"`
	Labels       []string  `dynamodbav:"labels,omitempty"`
	// RunnerGroup is the organisation runner group the runner joins (org scope only).
	RunnerGroup string `dynamodbav:"runnerGroup,omitempty"`
	// RunnerPrefix starts the runner's name (RunnerNames): it names the stack.
	RunnerPrefix string `dynamodbav:"runnerPrefix,omitempty"`
	// ClaimID identifies the provision that holds the instance, so that a duplicated offer never
	// credits one instance to two provisions of the same run.
	ClaimID string `dynamodbav:"claimId,omitempty"`
	// RunnerID is GitHub's id of the just-in-time runner made for the job, which the dispatcher
	// deletes when the runner gets no job.
	RunnerID int64 `dynamodbav:"runnerId,omitempty"`
	// Installation is the GitHub App installation the job came from: the dispatcher's
	// credentials for the job's runner.
	Installation int64 `dynamodbav:"installation,omitempty"`
	// HandOverSum is SecretSum of the secret the assignment's hand-over carries, written by
	// whoever assigns: the agent takes only the hand-over whose secret has it, so one pushed into
	// its doorbell by anyone else is refused. Never the secret itself.
	HandOverSum string `dynamodbav:"hoSum,omitempty"`
	// Job says what GitHub calls a label-routed job and where it shows it (nil for a run).
	Job *JobInfo `dynamodbav:"job,omitempty"`
	// TookJob is the job the runner made for a label-routed job ran (its in_progress): a
	// sibling of the pool and repository may take the runner instead (docs/labels.md).
	TookJob int64 `dynamodbav:"tookJob,omitempty"`
}

// JobInfo is a label-routed job as GitHub shows it: its name, its workflow's name, and its page.
type JobInfo struct {
	Name     string `dynamodbav:"name,omitempty" json:"name,omitempty"`
	Workflow string `dynamodbav:"workflow,omitempty" json:"workflow,omitempty"`
	URL      string `dynamodbav:"url,omitempty" json:"url,omitempty"`
}

// ServesJob reports whether the assignment is a label-routed job's (its key is j<job id>) rather
// than a workflow run's.
func (a Assignment) ServesJob() bool { return names.IsJobKey(a.RunID) }

// Report is what the agent writes about itself: the latest signal and the heartbeat.
type Report struct {
	Signal        SignalName `dynamodbav:"sig,omitempty"`
	SignalRun     string     `dynamodbav:"sigRun,omitempty"`
	SignalVersion int64      `dynamodbav:"sigVersion,omitempty"`
	SignalAt      time.Time  `dynamodbav:"sigAt,omitempty"`
	SignalLog     string     `dynamodbav:"sigLog,omitempty"`
	HeartbeatAt   time.Time  `dynamodbav:"heartbeatAt,omitempty"`
	// AckVersion is the item version of the last assignment the agent noticed: provision's proof
	// of life after a claim, free of clock skew.
	AckVersion int64 `dynamodbav:"ackVersion,omitempty"`
	// AskVersion and Asks are the agent's request for the hand-over of the assignment at
	// AskVersion, which its doorbell did not bring (a restart, a lost message): Asks counts the
	// requests, so a control plane that holds the secret answers each one once (design §5a).
	AskVersion   int64  `dynamodbav:"askVersion,omitempty"`
	Asks         int    `dynamodbav:"asks,omitempty"`
	AgentVersion string `dynamodbav:"agentVersion,omitempty"`
	// DeregisterMs is how long, in milliseconds, the agent took from the ring that told it of its
	// last release (or, without one, the read that found it) to signalling DEREGISTERED (runner
	// stopped, run cleaned up): release reads the item first
	// about that long after its ring (ReadPlan), instead of polling from the start.
	DeregisterMs int64 `dynamodbav:"deregMs,omitempty"`
	// RegisterMs is how long, in milliseconds, the agent took from the ring that brought its last
	// assignment (or, without one, the read that found it) to signalling REGISTERED: provision
	// reads a claim's items first about that long after the claim (design §6).
	RegisterMs int64 `dynamodbav:"regMs,omitempty"`
}

// Instance is one item of the table: one EC2 instance launched by Hangar.
type Instance struct {
	ARN            string    `dynamodbav:"instanceArn"`
	ID             string    `dynamodbav:"instanceId"`
	Pool           string    `dynamodbav:"pool"`
	State          State     `dynamodbav:"state"`
	Version        int64     `dynamodbav:"version"`
	Threshold      time.Time `dynamodbav:"threshold,omitempty"`
	PoolStateShard string    `dynamodbav:"poolStateShard,omitempty"`
	LastRunID      string    `dynamodbav:"lastRunId,omitempty"`
	LaunchedAt     time.Time `dynamodbav:"launchedAt,omitempty"`
	UpdatedAt      time.Time `dynamodbav:"updatedAt,omitempty"`
	StateReason    string    `dynamodbav:"stateReason,omitempty"`
	ExpiresAt      int64     `dynamodbav:"expiresAt,omitempty"` // TTL, Unix seconds
	// Bell is the instance's doorbell queue URL (package doorbell), fixed at creation; empty for
	// an instance without one, whose agent polls its item instead.
	Bell string `dynamodbav:"bell,omitempty"`
	// RegisterFailures counts the runs in a row whose runner this instance failed to register;
	// a registered runner resets it.
	RegisterFailures int `dynamodbav:"registerFailures,omitempty"`
	// ServedRepos and ServedOwners are every repository, and its owner, that the instance was
	// ever assigned to: what the claim condition of a pool's reuse scope checks. Never cleared.
	ServedRepos  []string `dynamodbav:"servedRepos,stringset,omitempty"`
	ServedOwners []string `dynamodbav:"servedOwners,stringset,omitempty"`
	Spec
	Assignment
	Report
	Home
}

// Home is how the instance goes back to its pool when a run ends, as its pool's document said
// when it was launched or last claimed (both writes set it from the document in hand): release
// gives an instance back by its item alone, without reading the documents (design §2, §6).
type Home struct {
	// IdleSecs is the pool's idle timeout, in seconds: the deadline of the instance once back.
	IdleSecs int64 `dynamodbav:"idleSecs,omitempty"`
	// Queue is the pool's queue URL, where the instance is offered once back.
	Queue string `dynamodbav:"offerTo,omitempty"`
	// Retire says why the instance may not be offered again ("" when it may): its pool's reuse
	// is never, or its pool was drained while it served a run (Store.MarkRetire). Never cleared.
	Retire string `dynamodbav:"retire,omitempty"`
	// HistoryDays is how long the stack keeps history (Store.HistoryRetention; 0: the default).
	HistoryDays int `dynamodbav:"historyDays,omitempty"`
}

// Known reports whether h says where and for how long the instance goes back: an item the pool
// wrote, at a launch or a claim, does.
func (h Home) Known() bool { return h.IdleSecs > 0 && h.Queue != "" }

// IdleTimeout is the idle deadline's length.
func (h Home) IdleTimeout() time.Duration { return time.Duration(h.IdleSecs) * time.Second }

// SignalFor reports whether the instance's latest signal is name, about run, written for version
// minVersion or later: the test a waiter applies after its own transition wrote minVersion.
func (i *Instance) SignalFor(name SignalName, run string, minVersion int64) bool {
	return i.Signal == name && i.SignalRun == run && i.SignalVersion >= minVersion
}

// sumContext separates hand-over sums from any other use of SHA-256 over the same secret.
const sumContext = "hangar hand-over\n"

// SecretSum is what an assignment records of the secret its hand-over carries (HandOverSum): the
// agent takes a hand-over only when its secret has this sum, so only whoever wrote the
// assignment can hand it over. A secret's sum says nothing of the secret.
func SecretSum(secret string) string {
	h := sha256.Sum256([]byte(sumContext + secret))
	return hex.EncodeToString(h[:])
}
