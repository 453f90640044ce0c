package state

import (
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/platform/awserr"

	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DefaultHistoryRetention is how long history stays before TTL removes it, unless the store is
// told otherwise (Store.HistoryRetention, from the pool documents' historyDays): a terminated
// instance's item and the record of every run an instance served (RunRecord).
const DefaultHistoryRetention = 90 * 24 * time.Hour

// RetentionOf is the history retention of a stack's history.days (DefaultHistoryRetention for 0
// or less).
func RetentionOf(days int) time.Duration {
	if days <= 0 {
		return DefaultHistoryRetention
	}
	return time.Duration(days) * 24 * time.Hour
}

// Change is one transition of one instance: from the state, run and version the caller saw to a
// new state with a new deadline.
type Change struct {
	InstanceID string
	// Pool is the instance's pool (part of the condition, and of the index key the write sets).
	Pool     string
	From, To State
	// Version is the item version the caller last saw; the write is conditional on it.
	Version int64
	// RunID is the run the instance holds now, for transitions out of a state with a run
	// (created or claimed → running, claimed or running → idle). Into terminated it is optional:
	// when given it is part of the condition and kept as lastRunId.
	RunID string
	// Assign is the run the instance is claimed for (idle or stopped → claimed).
	Assign *Assignment
	// Home, with a claim, is how the instance goes back, from the claimer's pool document: its
	// idle timeout and queue are set, and its Retire too when given (an instance marked to
	// retire stays marked).
	Home *Home
	// AliveSince, for a claim from idle, requires the agent's last heartbeat at or after it: an
	// instance whose agent has gone quiet is not handed a run.
	AliveSince time.Time
	// Reuse is the pool's reuse scope, for a claim: the write is conditional on the instance
	// having served only runs the scope lets Assign.Repo follow ("" is ReuseRepository).
	Reuse Reuse
	// Threshold is the deadline of the new state; required unless To is terminated.
	Threshold time.Time
	// Reason is recorded as stateReason.
	Reason string
	// RegisterFailed counts a failed runner registration (claimed → idle): registerFailures goes
	// up by one. Moving to running resets the count.
	RegisterFailed bool
	// TookJob, moving a label-routed job's instance to running, is the job its runner took.
	TookJob int64
	// Unacknowledged gives a claim back (claimed → idle) only if the agent has not acknowledged
	// it (ackVersion below Version). The agent's acknowledgement is conditional on the version it
	// noticed, so once this write wins the agent never serves the claim: nothing of the run
	// reached the instance, and it may be offered at once, without waiting for a deregistration.
	Unacknowledged bool
	// Marked says the caller read the instance marked to retire (Home.Retire). A change that
	// gives an instance back (Releases) is conditional on the mark being as read, so that what
	// it returns never misses a mark a drain made meanwhile (Store.MarkRetire moves no version).
	Marked bool
	// Registered moves a claimed or created instance to running only if its agent has signalled
	// REGISTERED for the run at Version or later: the write is the read too, for a caller
	// waiting on one instance (a lost condition returns the item as it is).
	Registered bool
}

// Liveness bounds (docs/design.md §10). The agent writes heartbeatAt every 30 seconds, and at
// once when it notices an assignment.
const (
	// HeartbeatFresh is how recent an idle instance's heartbeat must be for a claim: three of the
	// agent's heartbeat intervals.
	HeartbeatFresh = 90 * time.Second
	// AckTimeout is how long a claimed running instance's agent has to show it noticed the claim
	// (ackVersion) before provision replaces it: an agent acknowledges as its doorbell rings, or
	// at its next safety read of the item without one.
	AckTimeout = 30 * time.Second
	// StartAckTimeout is the same bound for a claimed stopped instance, which must boot first.
	StartAckTimeout = 3 * time.Minute
)

const (
	attrIdleSecs    = "idleSecs"
	attrOfferTo     = "offerTo"
	attrHistoryDays = "historyDays"
	AttrRetire      = "retire"
	attrHeartbeatAt = "heartbeatAt"
	attrAckVersion  = "ackVersion"
	attrSig         = "sig"
	attrSigRun      = "sigRun"
	attrSigVersion  = "sigVersion"
)

// MaxRegisterFailures is how many registrations in a row an instance may fail before it is
// terminated rather than offered again.
const MaxRegisterFailures = 2

// assignmentAttrs are removed when a run gives the instance back.
var assignmentAttrs = []string{"runId", "runAttempt", "repo", "runnerUrl", "labels",
	"runnerGroup", "runnerPrefix", "claimId", "runnerId", "installation", "hoSum", "assignedAt", "claimed", "registeredAt", "job", "tookJob"}

// Validate checks the change against the state machine and its own fields, without a request.
func (c Change) Validate() error {
	if err := names.ValidateInstanceID(c.InstanceID); err != nil {
		return err
	}
	r, err := lookup(c.From, c.To)
	if err != nil {
		return err
	}
	if err := names.ValidatePool(c.Pool); err != nil {
		return fmt.Errorf("%s → %s of %s: %w", c.From, c.To, c.InstanceID, err)
	}
	if c.Version < 1 {
		return fmt.Errorf("%s → %s of %s: version %d: want the version last read (1 or more)", c.From, c.To, c.InstanceID, c.Version)
	}
	if c.To != Terminated && c.Threshold.IsZero() {
		return fmt.Errorf("%s → %s of %s: threshold is not set: every live state needs a deadline", c.From, c.To, c.InstanceID)
	}
	switch r.before {
	case runAny, runAbsentOrRelease:
		if c.RunID != "" {
			if err := names.ValidateAssignmentKey(c.RunID); err != nil {
				return fmt.Errorf("%s → %s of %s: %w", c.From, c.To, c.InstanceID, err)
			}
		}
	case runMatch, runRelease:
		if err := names.ValidateAssignmentKey(c.RunID); err != nil {
			return fmt.Errorf("%s → %s of %s: %w", c.From, c.To, c.InstanceID, err)
		}
	case runSet:
		if c.Assign == nil {
			return fmt.Errorf("%s → %s of %s: no assignment: a claim names the run it is for", c.From, c.To, c.InstanceID)
		}
		if err := names.ValidateAssignmentKey(c.Assign.RunID); err != nil {
			return fmt.Errorf("%s → %s of %s: %w", c.From, c.To, c.InstanceID, err)
		}
		if err := names.ValidateRepository(c.Assign.Repo); err != nil {
			return fmt.Errorf("%s → %s of %s: a claim names the run's repository: %w", c.From, c.To, c.InstanceID, err)
		}
		if _, err := ParseReuse(string(c.Reuse)); err != nil {
			return fmt.Errorf("%s → %s of %s: reuse %w", c.From, c.To, c.InstanceID, err)
		}
	}
	if (c.Assign != nil || c.Home != nil) && r.before != runSet {
		return fmt.Errorf("%s → %s of %s: an assignment is only given with a claim", c.From, c.To, c.InstanceID)
	}
	if c.Home != nil && !c.Home.Known() {
		return fmt.Errorf("%s → %s of %s: home %+v: want the pool's idle timeout (1 s or more) and queue URL", c.From, c.To, c.InstanceID, *c.Home)
	}
	if c.RegisterFailed && (c.From != Claimed || c.To != Idle) {
		return fmt.Errorf("%s → %s of %s: a failed registration is only counted when a claim is given back (claimed → idle)", c.From, c.To, c.InstanceID)
	}
	if c.Registered && c.To != Running {
		return fmt.Errorf("%s → %s of %s: only a move to running waits on the runner's registration", c.From, c.To, c.InstanceID)
	}
	if c.Unacknowledged && (c.From != Claimed || c.To != Idle) {
		return fmt.Errorf("%s → %s of %s: only a claim its agent has not acknowledged is given back unacknowledged (claimed → idle)", c.From, c.To, c.InstanceID)
	}
	return nil
}

// Transition moves one instance from c.From to c.To if, and only if, the item is still in c.From
// with c.Version (and c.RunID where the state machine says so). It returns the item as written.
// A lost condition returns a *ConflictError carrying the item as it is; an illegal or malformed
// change returns an error before any request.
func (s *Store) Transition(ctx context.Context, c Change) (*Instance, error) {
	u, err := s.update(c, s.now())
	if err != nil {
		return nil, err
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: u.TableName, Key: u.Key, ConditionExpression: u.ConditionExpression, UpdateExpression: u.UpdateExpression,
		ExpressionAttributeNames: u.ExpressionAttributeNames, ExpressionAttributeValues: u.ExpressionAttributeValues,
		ReturnValues: types.ReturnValueAllNew, ReturnValuesOnConditionCheckFailure: u.ReturnValuesOnConditionCheckFailure,
	})
	if err != nil {
		if awserr.IsConditionFailed(err) {
			return nil, c.conflict(conditionItem(err))
		}
		return nil, fmt.Errorf("%s → %s of %s: %w", c.From, c.To, c.InstanceID, err)
	}
	return unmarshalItem(out.Attributes)
}

// update is c's conditional update of its item, written at now, as one request or one item of a
// transaction takes it; a lost condition returns the item as it is.
func (s *Store) update(c Change, now time.Time) (*types.Update, error) {
	expr, err := c.expression(now, s.retention())
	if err != nil {
		return nil, err
	}
	return &types.Update{
		TableName:                           &s.table,
		Key:                                 s.key(c.InstanceID),
		ConditionExpression:                 expr.Condition(),
		UpdateExpression:                    expr.Update(),
		ExpressionAttributeNames:            expr.Names(),
		ExpressionAttributeValues:           expr.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, nil
}

// conflict is the error of c's lost condition, carrying old, the item the write found (none when
// empty).
func (c Change) conflict(old map[string]types.AttributeValue) error {
	conflict := &ConflictError{InstanceID: c.InstanceID, From: c.From, To: c.To, RunID: c.RunID, Version: c.Version}
	if len(old) > 0 {
		cur, err := unmarshalItem(old)
		if err != nil {
			return fmt.Errorf("%s → %s of %s: lost, and the current item is unreadable: %w", c.From, c.To, c.InstanceID, err)
		}
		conflict.Current = cur
	}
	return conflict
}

// expression validates c and builds its condition and update, as written at now; an instance
// terminated is kept for retention.
func (c Change) expression(now time.Time, retention time.Duration) (expression.Expression, error) {
	if err := c.Validate(); err != nil {
		return expression.Expression{}, err
	}
	r, _ := lookup(c.From, c.To)

	cond := expression.Name("state").Equal(expression.Value(c.From)).
		And(expression.Name("version").Equal(expression.Value(c.Version))).
		And(expression.Name("pool").Equal(expression.Value(c.Pool)))
	switch {
	case c.RunMustMatch():
		cond = cond.And(expression.Name(AttrRunID).Equal(expression.Value(c.RunID)))
	case c.RunMustBeAbsent():
		cond = cond.And(expression.AttributeNotExists(expression.Name(AttrRunID)))
	}
	if r.before == runSet {
		if reuse, ok := reuseCondition(c.Reuse, c.Assign.Repo); ok {
			cond = cond.And(reuse)
		}
		if !c.AliveSince.IsZero() && c.From == Idle {
			cond = cond.And(expression.Name(attrHeartbeatAt).GreaterThanEqual(expression.Value(millis(c.AliveSince))))
		}
	}
	if c.Registered {
		cond = cond.And(expression.Name(attrSig).Equal(expression.Value(SignalRegistered))).
			And(expression.Name(attrSigRun).Equal(expression.Value(c.RunID))).
			And(expression.Name(attrSigVersion).GreaterThanEqual(expression.Value(c.Version)))
	}
	if c.Releases() {
		if c.Marked {
			cond = cond.And(expression.AttributeExists(expression.Name(AttrRetire)))
		} else {
			cond = cond.And(expression.AttributeNotExists(expression.Name(AttrRetire)))
		}
	}
	if c.Unacknowledged {
		cond = cond.And(expression.Or(expression.AttributeNotExists(expression.Name(attrAckVersion)),
			expression.Name(attrAckVersion).LessThan(expression.Value(c.Version))))
	}

	u := &update{b: expression.Set(expression.Name("state"), expression.Value(c.To))}
	u.set("version", c.Version+1)
	u.set("updatedAt", millis(now))
	u.setOrRemove("stateReason", c.Reason != "", c.Reason)
	if c.To == Terminated {
		// Leave the run index and the live states, keep the run for audit: the item is the
		// instance's history now, found by its pool and end time, until TTL removes it.
		u.set(AttrThreshold, millis(now))
		u.set(AttrPoolStateShard, PoolStateShard(c.Pool, Terminated, c.InstanceID))
		u.remove(assignmentAttrs...)
		u.set(AttrTTL, now.Add(retention).Unix())
		if c.RunID != "" {
			u.set("lastRunId", c.RunID)
		}
	} else {
		u.set(AttrThreshold, millis(c.Threshold))
		u.set(AttrPoolStateShard, PoolStateShard(c.Pool, c.To, c.InstanceID))
	}
	switch {
	case r.before == runSet:
		a := c.Assign
		u.set(AttrRunID, a.RunID)
		u.setOrRemove("runAttempt", a.RunAttempt != 0, a.RunAttempt)
		u.setOrRemove("repo", a.Repo != "", a.Repo)
		u.setOrRemove("runnerUrl", a.RunnerURL != "", a.RunnerURL)
		u.setOrRemove("labels", len(a.Labels) > 0, a.Labels)
		u.setOrRemove("runnerGroup", a.RunnerGroup != "", a.RunnerGroup)
		u.setOrRemove("runnerPrefix", a.RunnerPrefix != "", a.RunnerPrefix)
		u.setOrRemove("claimId", a.ClaimID != "", a.ClaimID)
		u.setOrRemove("runnerId", a.RunnerID != 0, a.RunnerID)
		u.setOrRemove("installation", a.Installation != 0, a.Installation)
		u.setOrRemove("hoSum", a.HandOverSum != "", a.HandOverSum)
		u.setOrRemove("job", a.Job != nil, a.Job)
		u.remove("tookJob")
		u.set("assignedAt", millis(now))
		u.set("claimed", true)
		u.remove("registeredAt")
		u.b = u.b.Add(expression.Name(attrServedRepos), expression.Value(stringSet{a.Repo}))
		u.b = u.b.Add(expression.Name(attrServedOwners), expression.Value(stringSet{names.Owner(a.Repo)}))
		if h := c.Home; h != nil {
			u.set(attrIdleSecs, h.IdleSecs)
			u.set(attrOfferTo, h.Queue)
			u.setOrRemove(attrHistoryDays, h.HistoryDays > 0, h.HistoryDays)
			if h.Retire != "" {
				u.set(AttrRetire, h.Retire)
			}
		}
	case c.Releases():
		if !c.Unacknowledged { // a claim never acknowledged served nothing: the last run stays
			u.set("lastRunId", c.RunID)
		}
		u.remove(assignmentAttrs...)
		if c.RegisterFailed {
			u.b = u.b.Add(expression.Name("registerFailures"), expression.Value(1))
		}
	}
	if c.To == Running {
		u.set("registeredAt", millis(now)) // registered (or, for a job, started)
		if c.TookJob != 0 {
			u.set("tookJob", c.TookJob)
		}
		u.remove("registerFailures")
	}

	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(u.b).Build()
	if err != nil {
		return expression.Expression{}, fmt.Errorf("%s → %s of %s: build expression: %w", c.From, c.To, c.InstanceID, err)
	}
	return expr, nil
}

// update accumulates SET and REMOVE actions; expression.UpdateBuilder's methods return a new
// builder, which this hides.
type update struct{ b expression.UpdateBuilder }

func (u *update) set(name string, v any) { u.b = u.b.Set(expression.Name(name), expression.Value(v)) }

func (u *update) remove(names ...string) {
	for _, n := range names {
		u.b = u.b.Remove(expression.Name(n))
	}
}

func (u *update) setOrRemove(name string, set bool, v any) {
	if set {
		u.set(name, v)
	} else {
		u.remove(name)
	}
}
