package state

import (
	"context"
	"errors"
	"fmt"

	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
)

// ReadRun reads run's instances from table by their run alone (one Query of the byRun index),
// before the caller knows the account that keys the table: a step that has only the stack's
// name (TableName) reads them so, then opens the store with OpenFor. Its errors are ByRun's.
func ReadRun(ctx context.Context, db awsapi.DynamoDB, table, run string) ([]Instance, error) {
	if table == "" {
		return nil, errors.New("instances of run: table name is empty")
	}
	return (&Store{db: db, table: table}).ByRun(ctx, run)
}

// OpenFor returns a store of table for insts, keyed by the account their ARNs name, and keeping
// history as long as the longest their items say (Home.HistoryDays). It fails when insts is
// empty or their ARNs name more than one account.
func OpenFor(db awsapi.DynamoDB, table string, insts []Instance) (*Store, error) {
	if len(insts) == 0 {
		return nil, errors.New("state store: no instance names the account")
	}
	account, err := AccountFromARN(insts[0].ARN)
	if err != nil {
		return nil, fmt.Errorf("state store: %w", err)
	}
	days := 0
	for _, in := range insts {
		a, err := AccountFromARN(in.ARN)
		if err != nil {
			return nil, fmt.Errorf("state store: %w", err)
		}
		if a != account {
			return nil, fmt.Errorf("state store: instances of accounts %s and %s in one table", account.ID, a.ID)
		}
		days = max(days, in.HistoryDays)
	}
	s, err := NewStore(db, table, account)
	if err != nil {
		return nil, err
	}
	s.HistoryRetention = RetentionOf(days)
	return s, nil
}
