package state

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
	"sync"

	"github.com/hangar-ci/hangar/pkg/contract/names"
)

// Shards is the number of index partitions per pool and state (docs/design.md §2). It is part of
// the schema: items written with one count are not found by queries using another.
const Shards = 4

// Attribute and index names shared with the CDK stack.
const (
	AttrARN            = "instanceArn"
	AttrRunID          = "runId"
	AttrPoolStateShard = "poolStateShard"
	AttrThreshold      = "threshold"
	AttrTTL            = "expiresAt"
	IndexByRun         = "byRun"
	IndexByPoolState   = "byPoolState"
)

var (
	accountRe   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9]{12}$`) })
	regionRe    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`) })
	partitionRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^aws(-[a-z]+)*$`) })
)

// Account identifies where instances live; it turns instance ids into the ARNs that key the table.
type Account struct {
	Partition string // aws, aws-cn, aws-us-gov
	Region    string
	ID        string // 12 digits
}

// Validate checks every field.
func (a Account) Validate() error {
	if !partitionRe().MatchString(a.Partition) {
		return fmt.Errorf("partition %q is malformed: want aws, aws-cn or aws-us-gov", a.Partition)
	}
	if !regionRe().MatchString(a.Region) {
		return fmt.Errorf("region %q is malformed: want a region name such as us-east-1", a.Region)
	}
	if !accountRe().MatchString(a.ID) {
		return fmt.Errorf("account %q is malformed: want 12 digits", a.ID)
	}
	return nil
}

// ARN returns the instance ARN that keys instance id's item.
func (a Account) ARN(id string) string {
	return fmt.Sprintf("arn:%s:ec2:%s:%s:instance/%s", a.Partition, a.Region, a.ID, id)
}

// AccountFromARN returns the account an instance ARN names.
func AccountFromARN(arn string) (Account, error) {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "ec2" || !strings.HasPrefix(parts[5], "instance/") {
		return Account{}, fmt.Errorf("instance ARN %q is malformed: want arn:<partition>:ec2:<region>:<account>:instance/<id>", arn)
	}
	a := Account{Partition: parts[1], Region: parts[3], ID: parts[4]}
	if err := a.Validate(); err != nil {
		return Account{}, fmt.Errorf("instance ARN %q: %w", arn, err)
	}
	return a, nil
}

// TableName is the state table of stack: the CDK app names it so, and a step that has only the
// stack's name finds it by it.
func TableName(stack string) string { return stack + "-instances" }

// InstanceIDFromARN returns the instance id an instance ARN names.
func InstanceIDFromARN(arn string) (string, error) {
	i := strings.LastIndex(arn, ":instance/")
	if !strings.HasPrefix(arn, "arn:") || i < 0 {
		return "", fmt.Errorf("instance ARN %q is malformed: want arn:<partition>:ec2:<region>:<account>:instance/<id>", arn)
	}
	id := arn[i+len(":instance/"):]
	if err := names.ValidateInstanceID(id); err != nil {
		return "", fmt.Errorf("instance ARN %q: %w", arn, err)
	}
	return id, nil
}

// Shard returns the index shard (0..Shards-1) of an instance id.
func Shard(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % Shards)
}

// PoolStateShard returns the byPoolState partition key of an instance in a state.
func PoolStateShard(pool string, s State, id string) string {
	return poolStateKey(pool, s, Shard(id))
}

func poolStateKey(pool string, s State, shard int) string {
	return fmt.Sprintf("%s#%s#%d", pool, s, shard)
}
