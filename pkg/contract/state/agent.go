package state

import (
	"strings"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/platform/awserr"

	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// AgentAttributes are the only attributes the agent writes (docs/design.md §2). The instance
// role's policy allows UpdateItem on these alone.
var AgentAttributes = []string{"sig", "sigRun", "sigVersion", "sigAt", "sigLog", "heartbeatAt", "ackVersion", "askVersion", "asks", "agentVersion", "deregMs", "regMs"}

// MaxLogTail is the most of a log the agent stores with a signal.
const MaxLogTail = 4096

// Agent is the instance agent's view of the table: its own item only, and of that it writes
// only the agent attributes (sig*, heartbeatAt, agentVersion). It never creates an item and never
// writes state, runId, threshold or any other control-plane attribute.
type Agent struct {
	db      awsapi.AgentDynamoDB
	table   string
	arn     string
	id      string
	version string
}

// NewAgent returns the agent-side store for the instance whose ARN is arn. agentVersion is
// recorded with every heartbeat.
func NewAgent(db awsapi.AgentDynamoDB, table, arn, agentVersion string) (*Agent, error) {
	id, err := InstanceIDFromARN(arn)
	if err != nil {
		return nil, err
	}
	if table == "" {
		return nil, errors.New("agent store: table name is empty")
	}
	return &Agent{db: db, table: table, arn: arn, id: id, version: agentVersion}, nil
}

func (a *Agent) key() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrARN: &types.AttributeValueMemberS{Value: a.arn}}
}

// Get reads the agent's own item strongly consistently, or returns ErrNotFound.
func (a *Agent) Get(ctx context.Context) (*Instance, error) {
	out, err := a.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &a.table, Key: a.key(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("read own item %s: %w", a.id, err)
	}
	if len(out.Item) == 0 {
		return nil, fmt.Errorf("read own item %s: %w", a.id, ErrNotFound)
	}
	return unmarshalItem(out.Item)
}

// Signal is one signal the agent reports.
type Signal struct {
	Name SignalName
	// Run is the run the signal is about: required for REGISTERED, REGISTER_FAILED and
	// DEREGISTERED, empty for the others.
	Run string
	// Version is the item version the agent acted on; the write is refused (ErrConflict) if the
	// control plane has moved the item since.
	Version int64
	// Log is kept to its last MaxLogTail bytes.
	Log string
	At  time.Time
	// Took is, with DEREGISTERED, how long the agent took from noticing the release (written
	// as the item's deregMs), with REGISTERED, how long it took from noticing the assignment
	// (regMs); zero leaves it as it was.
	Took time.Duration
}

// Validate checks the signal's fields.
func (s Signal) Validate() error {
	if !s.Name.Valid() {
		return fmt.Errorf("signal %q is unknown: want READY, REGISTERED, REGISTER_FAILED, DEREGISTERED, FAILED or SPOT_INTERRUPTED", s.Name)
	}
	if runSignals[s.Name] {
		if err := names.ValidateAssignmentKey(s.Run); err != nil {
			return fmt.Errorf("signal %s: %w", s.Name, err)
		}
	} else if s.Run != "" {
		return fmt.Errorf("signal %s is about no run, got run %q", s.Name, s.Run)
	}
	if s.Version < 1 {
		return fmt.Errorf("signal %s: version %d: want the item version acted on", s.Name, s.Version)
	}
	return nil
}

// Signal writes sig to the agent's item, conditioned on the item still being at sig.Version. A
// refused condition returns an error matching ErrConflict (re-read and decide again); a missing
// item returns ErrNotFound.
func (a *Agent) Signal(ctx context.Context, sig Signal) error {
	if err := sig.Validate(); err != nil {
		return err
	}
	if sig.At.IsZero() {
		sig.At = time.Now()
	}
	u := &update{b: expression.Set(expression.Name("sig"), expression.Value(sig.Name))}
	u.set("sigRun", sig.Run)
	u.set("sigVersion", sig.Version)
	u.set("sigAt", millis(sig.At))
	u.set("sigLog", LogTail(sig.Log, MaxLogTail))
	if sig.Took > 0 {
		switch sig.Name {
		case SignalDeregistered:
			u.set("deregMs", max(sig.Took.Milliseconds(), 1))
		case SignalRegistered:
			u.set("regMs", max(sig.Took.Milliseconds(), 1))
		}
	}
	cond := expression.AttributeExists(expression.Name(AttrARN)).
		And(expression.Name("version").Equal(expression.Value(sig.Version)))
	_, err := a.write(ctx, "signal "+string(sig.Name), cond, u, types.ReturnValueNone)
	return err
}

// Heartbeat records that the agent is alive at time at, and returns the item as it is after the
// write: a heartbeat is also a read, so an agent that polls its item can fold heartbeats into its
// polls and spend one request either way.
func (a *Agent) Heartbeat(ctx context.Context, at time.Time) (*Instance, error) {
	u := &update{b: expression.Set(expression.Name("heartbeatAt"), expression.Value(millis(at)))}
	if a.version != "" {
		u.set("agentVersion", a.version)
	}
	out, err := a.write(ctx, "heartbeat", expression.AttributeExists(expression.Name(AttrARN)), u, types.ReturnValueAllNew)
	if err != nil {
		return nil, err
	}
	return unmarshalItem(out.Attributes)
}

// Ack records, with a heartbeat, that the agent has noticed the assignment written at version:
// the sign of life provision waits for after a claim.
func (a *Agent) Ack(ctx context.Context, version int64, at time.Time) error {
	return a.acknowledge(ctx, "ack", version, 0, at)
}

// AckRead acknowledges the assignment of run written at version, as Ack does, and returns the
// item as it was just before: whether an earlier agent of this instance had acknowledged it
// shows in AckVersion. It is the agent's read of its item and its acknowledgement in one request,
// for an assignment whose hand-over the doorbell brought; ErrConflict when the item no longer
// holds run at version (the agent then reads it).
func (a *Agent) AckRead(ctx context.Context, run string, version int64, at time.Time) (*Instance, error) {
	if version < 1 || run == "" {
		return nil, fmt.Errorf("ack of %s: run %q version %d: want the run and version of the assignment handed over", a.id, run, version)
	}
	u := &update{b: expression.Set(expression.Name("heartbeatAt"), expression.Value(millis(at)))}
	u.set(attrAckVersion, version)
	cond := expression.AttributeExists(expression.Name(AttrARN)).And(expression.Name("version").Equal(expression.Value(version))).
		And(expression.Name(AttrRunID).Equal(expression.Value(run)))
	out, err := a.write(ctx, "ack", cond, u, types.ReturnValueAllOld)
	if err != nil {
		return nil, err
	}
	return unmarshalItem(out.Attributes)
}

// Ask records, with the acknowledgement, the agent's n-th request for the hand-over of the
// assignment written at version, which its doorbell has not brought: the control plane that holds
// the secret sends it again once per request (design §5a).
func (a *Agent) Ask(ctx context.Context, version int64, n int, at time.Time) error {
	if n < 1 {
		return fmt.Errorf("ask of %s: request %d: want a request count from 1", a.id, n)
	}
	return a.acknowledge(ctx, "ask", version, n, at)
}

// acknowledge writes ackVersion (and, for an ask, askVersion and asks) with a heartbeat, only
// while the item is still at the version noticed: a claim given back unacknowledged
// (Change.Unacknowledged) must never be served, and an ask about a version the item has left is
// answered by nobody.
func (a *Agent) acknowledge(ctx context.Context, what string, version int64, asks int, at time.Time) error {
	if version < 1 {
		return fmt.Errorf("%s of %s: version %d: want the version of the assignment noticed", what, a.id, version)
	}
	u := &update{b: expression.Set(expression.Name("heartbeatAt"), expression.Value(millis(at)))}
	u.set(attrAckVersion, version)
	if asks > 0 {
		u.set("askVersion", version)
		u.set("asks", asks)
	}
	cond := expression.AttributeExists(expression.Name(AttrARN)).And(expression.Name("version").Equal(expression.Value(version)))
	_, err := a.write(ctx, what, cond, u, types.ReturnValueNone)
	return err
}

func (a *Agent) write(ctx context.Context, what string, cond expression.ConditionBuilder, u *update, ret types.ReturnValue) (*dynamodb.UpdateItemOutput, error) {
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(u.b).Build()
	if err != nil {
		return nil, fmt.Errorf("%s of %s: build expression: %w", what, a.id, err)
	}
	out, err := a.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           &a.table,
		Key:                                 a.key(),
		ConditionExpression:                 expr.Condition(),
		UpdateExpression:                    expr.Update(),
		ExpressionAttributeNames:            expr.Names(),
		ExpressionAttributeValues:           expr.Values(),
		ReturnValues:                        ret,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	switch {
	case err == nil:
		return out, nil
	case awserr.IsConditionFailed(err) && len(conditionItem(err)) == 0:
		return nil, fmt.Errorf("%s of %s: %w", what, a.id, ErrNotFound)
	case awserr.IsConditionFailed(err):
		cur, _ := unmarshalItem(conditionItem(err))
		holder := "unreadable"
		if cur != nil {
			holder = cur.Holder()
		}
		return nil, fmt.Errorf("%s of %s: the item moved on (now %s): %w", what, a.id, holder, ErrConflict)
	default:
		return nil, fmt.Errorf("%s of %s: %w", what, a.id, err)
	}
}

// LastLine returns the last non-blank line of a log tail (a signal's log, say), for a one-line
// message.
func LastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "\n"); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// LogTail returns the last max bytes of s, cut at a UTF-8 boundary.
func LogTail(s string, max int) string {
	if len(s) <= max {
		return s
	}
	s = s[len(s)-max:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}
