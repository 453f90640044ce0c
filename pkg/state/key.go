package state

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
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
	instanceIDRe = regexp.MustCompile(`^i-[0-9a-f]{8,17}$`)
	poolNameRe   = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,46}[a-z0-9])?$`)
	runIDRe      = regexp.MustCompile(`^[1-9][0-9]{0,19}$`)
	accountRe    = regexp.MustCompile(`^[0-9]{12}$`)
	regionRe     = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
	partitionRe  = regexp.MustCompile(`^aws(-[a-z]+)*$`)
)

// ValidateInstanceID checks an EC2 instance id (i- and 8 or 17 hex digits).
func ValidateInstanceID(id string) error {
	if !instanceIDRe.MatchString(id) {
		return fmt.Errorf("instance id %q is malformed: want i- followed by 8 to 17 lowercase hex digits", id)
	}
	return nil
}

// ValidatePool checks a pool name: 1–48 of [a-z0-9-], starting and ending with a letter or digit.
func ValidatePool(name string) error {
	if !poolNameRe.MatchString(name) {
		return fmt.Errorf("pool name %q is malformed: want 1 to 48 of a-z, 0-9 and '-', not starting or ending with '-'", name)
	}
	return nil
}

// ValidateRunID checks a GitHub workflow run id: decimal digits, no leading zero.
func ValidateRunID(run string) error {
	if run == "" {
		return fmt.Errorf("run id is empty: want the workflow's github.run_id (decimal digits)")
	}
	if !runIDRe.MatchString(run) {
		return fmt.Errorf("run id %q is malformed: want the workflow's github.run_id (1 to 20 decimal digits, no leading zero)", run)
	}
	return nil
}

// Account identifies where instances live; it turns instance ids into the ARNs that key the table.
type Account struct {
	Partition string // aws, aws-cn, aws-us-gov
	Region    string
	ID        string // 12 digits
}

// Validate checks every field.
func (a Account) Validate() error {
	if !partitionRe.MatchString(a.Partition) {
		return fmt.Errorf("partition %q is malformed: want aws, aws-cn or aws-us-gov", a.Partition)
	}
	if !regionRe.MatchString(a.Region) {
		return fmt.Errorf("region %q is malformed: want a region name such as us-east-1", a.Region)
	}
	if !accountRe.MatchString(a.ID) {
		return fmt.Errorf("account %q is malformed: want 12 digits", a.ID)
	}
	return nil
}

// ARN returns the instance ARN that keys instance id's item.
func (a Account) ARN(id string) string {
	return fmt.Sprintf("arn:%s:ec2:%s:%s:instance/%s", a.Partition, a.Region, a.ID, id)
}

// InstanceIDFromARN returns the instance id an instance ARN names.
func InstanceIDFromARN(arn string) (string, error) {
	i := strings.LastIndex(arn, ":instance/")
	if !strings.HasPrefix(arn, "arn:") || i < 0 {
		return "", fmt.Errorf("instance ARN %q is malformed: want arn:<partition>:ec2:<region>:<account>:instance/<id>", arn)
	}
	id := arn[i+len(":instance/"):]
	if err := ValidateInstanceID(id); err != nil {
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
