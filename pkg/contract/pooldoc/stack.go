package pooldoc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
)

// Stack is a deployed stack as its pool documents describe it: the pools and what they share
// (one state table in one account). It is what every part of the control plane starts from.
type Stack struct {
	Name  string
	Pools []*Document
	// Table and Account locate the state table every pool of the stack shares.
	Table   string
	Account state.Account
	// Problems reports pool documents that could not be read; the other pools still serve.
	Problems error
}

// Pool returns the named pool's document, or nil.
func (s *Stack) Pool(name string) *Document {
	i := slices.IndexFunc(s.Pools, func(d *Document) bool { return d.Name == name })
	if i < 0 {
		return nil
	}
	return s.Pools[i]
}

// HistoryRetention is how long the stack keeps its history (its documents' historyDays): the
// longest any document names, so that no writer removes history sooner than the stack says.
func (s *Stack) HistoryRetention() time.Duration {
	var d time.Duration
	for _, doc := range s.Pools {
		d = max(d, doc.HistoryRetention())
	}
	if d == 0 {
		return state.DefaultHistoryRetention
	}
	return d
}

// ErrNoStack is matched by LoadStack's error for a stack with no pool document at all: a wrong
// name, or another account or region.
var ErrNoStack = errors.New("no such stack")

// LoadStack reads every pool document of stack and checks that they agree on the state table.
// A stack without a readable document is an error that says where the documents were looked for.
func LoadStack(ctx context.Context, client awsapi.SSM, stack string) (*Stack, error) {
	docs, problems := LoadAll(ctx, client, stack)
	if len(docs) == 0 {
		if problems != nil {
			return nil, fmt.Errorf("stack %q: no readable pool document under %s: %w", stack, ParameterPath(stack), problems)
		}
		return nil, fmt.Errorf("stack %q: %w: no pool documents under %s: is the stack name right, and is the stack deployed in this account and region?", stack, ErrNoStack, ParameterPath(stack))
	}
	s := &Stack{Name: stack, Pools: docs, Table: docs[0].Table, Account: docs[0].StateAccount(), Problems: problems}
	var differ []string
	for _, d := range docs[1:] {
		if d.Table != s.Table || d.StateAccount() != s.Account {
			differ = append(differ, d.Name)
		}
	}
	if len(differ) > 0 {
		return nil, fmt.Errorf("stack %q: pools %s name another state table than pool %s (%s in %s): every pool of a stack shares one table; redeploy the stack",
			stack, strings.Join(differ, ", "), docs[0].Name, s.Table, s.Account.ID)
	}
	return s, nil
}

// RefreshFunction is the name of stack's refresh function: the stack gives it this name, and
// the action's refresh mode invokes it by this name.
func RefreshFunction(stack string) string { return stack + "-refresh" }

// RefreshEventsFunction is the name of the stack's second refresh function, the same code run by
// EventBridge alone: the schedule and EC2's spot interruption warnings and state changes. No
// workflow may invoke it, so no workflow can forge an EC2 event.
func RefreshEventsFunction(stack string) string { return stack + "-refresh-events" }

// RefreshSourceEnv names the environment variable that tells a refresh function who invokes it:
// RefreshSourceEventBridge for RefreshEventsFunction; unset for RefreshFunction, which takes
// only manual refreshes ({"action":"refresh"}).
const (
	RefreshSourceEnv         = "HANGAR_REFRESH_SOURCE"
	RefreshSourceEventBridge = "eventbridge"
)
