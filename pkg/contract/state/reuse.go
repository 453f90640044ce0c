package state

import (
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/hangar-ci/hangar/pkg/contract/names"
)

// Reuse says which runs may be given an instance that has served another run (docs/design.md
// §3). Every instance remembers the repositories and owners of every run it was assigned to
// (servedRepos, servedOwners); a claim's condition checks them against the claiming run.
type Reuse string

// The reuse scopes of a pool.
const (
	// ReuseRepository: an instance that served repository R is claimed next only by runs of R.
	ReuseRepository Reuse = "repository"
	// ReuseOwner: an instance that served a repository of owner O is claimed next only by runs of
	// O's repositories.
	ReuseOwner Reuse = "owner"
	// ReuseAny: any run the pool allows may claim any idle instance.
	ReuseAny Reuse = "any"
	// ReuseNever: an instance serves one run and is terminated when released (ephemeral).
	ReuseNever Reuse = "never"
)

// Reuses lists the scopes, narrowest first.
var Reuses = []Reuse{ReuseNever, ReuseRepository, ReuseOwner, ReuseAny}

// ParseReuse returns the scope named s ("" is ReuseRepository), or an error naming the accepted
// values.
func ParseReuse(s string) (Reuse, error) {
	if s == "" {
		return ReuseRepository, nil
	}
	if r := Reuse(s); slices.Contains(Reuses, r) {
		return r, nil
	}
	return "", fmt.Errorf("%q: want repository, owner, any or never", s)
}

// Reusable reports whether an instance that has served the repositories served may be claimed by
// a run of repo under scope r. It is the rule the claim's condition enforces (reuseCondition),
// for a selector to skip offers that cannot fit without a write.
func Reusable(r Reuse, served []string, repo string) bool {
	if len(served) == 0 {
		return true // fresh: serves anyone the pool allows
	}
	switch r {
	case ReuseAny:
		return true
	case ReuseOwner:
		for _, s := range served {
			if names.Owner(s) != names.Owner(repo) {
				return false
			}
		}
		return true
	case ReuseNever:
		return false
	default:
		for _, s := range served {
			if s != repo {
				return false
			}
		}
		return true
	}
}

// reuseCondition is Reusable as a condition on the item. An instance counts as fresh only if it
// has no record of serving anyone and no last run either: an item that served a run before the
// record existed is not mistaken for a fresh one.
func reuseCondition(r Reuse, repo string) (expression.ConditionBuilder, bool) {
	fresh := expression.AttributeNotExists(expression.Name(attrServedRepos)).
		And(expression.AttributeNotExists(expression.Name("lastRunId")))
	one := func(attr, v string) expression.ConditionBuilder {
		n := expression.Name(attr)
		return fresh.Or(n.Size().Equal(expression.Value(1)).And(expression.Contains(n, v)))
	}
	switch r {
	case ReuseAny:
		return expression.ConditionBuilder{}, false
	case ReuseOwner:
		return one(attrServedOwners, names.Owner(repo)), true
	case ReuseNever:
		return fresh, true
	default:
		return one(attrServedRepos, repo), true
	}
}

const (
	attrServedRepos  = "servedRepos"
	attrServedOwners = "servedOwners"
)

// stringSet is written as a DynamoDB string set (SS), for ADD.
type stringSet []string

// MarshalDynamoDBAttributeValue implements attributevalue.Marshaler.
func (s stringSet) MarshalDynamoDBAttributeValue() (types.AttributeValue, error) {
	return &types.AttributeValueMemberSS{Value: s}, nil
}

// Claimable is the claim condition of scope r (reuseCondition) applied to an item in memory: an
// instance counts as fresh only with no record of serving anyone and no last run.
func Claimable(r Reuse, in *Instance, repo string) bool {
	fresh := len(in.ServedRepos) == 0 && in.LastRunID == ""
	switch r {
	case ReuseAny:
		return true
	case ReuseOwner:
		return fresh || (len(in.ServedOwners) == 1 && in.ServedOwners[0] == names.Owner(repo))
	case ReuseNever:
		return fresh
	default:
		return fresh || (len(in.ServedRepos) == 1 && in.ServedRepos[0] == repo)
	}
}
