package state

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
	"sync"
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
	instanceIDRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^i-[0-9a-f]{8,17}$`) })
	poolNameRe   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,46}[a-z0-9])?$`) })
	runIDRe      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[1-9][0-9]{0,19}$`) })
	jobKeyRe     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^j([1-9][0-9]{0,16})(r[1-9])?$`) })
	accountRe    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9]{12}$`) })
	regionRe     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`) })
	partitionRe  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^aws(-[a-z]+)*$`) })
)

// ValidateInstanceID checks an EC2 instance id (i- and 8 or 17 hex digits).
func ValidateInstanceID(id string) error {
	if !instanceIDRe().MatchString(id) {
		return fmt.Errorf("instance id %q is malformed: want i- followed by 8 to 17 lowercase hex digits", id)
	}
	return nil
}

// ValidatePool checks a pool name: 1–48 of [a-z0-9-], starting and ending with a letter or digit.
func ValidatePool(name string) error {
	if !poolNameRe().MatchString(name) {
		return fmt.Errorf("pool name %q is malformed: want 1 to 48 of a-z, 0-9 and '-', not starting or ending with '-'", name)
	}
	return nil
}

// ValidateRunID checks a GitHub workflow run id: decimal digits, no leading zero.
func ValidateRunID(run string) error {
	if run == "" {
		return fmt.Errorf("run id is empty: want the workflow's github.run_id (decimal digits)")
	}
	if !runIDRe().MatchString(run) {
		return fmt.Errorf("run id %q is malformed: want the workflow's github.run_id (1 to 20 decimal digits, no leading zero)", run)
	}
	return nil
}

// An instance serves one thing at a time, named by its item's runId: a workflow run (the steps:
// the run id, decimal digits) or a label-routed job (j<job id>, and r<n> when the job is
// dispatched again after another job took its runner). Both share the byRun index, the
// transitions' run conditions and the runner names; they never collide, since a run id is digits
// only.

// JobKey returns the key under which an instance serves job id: j<id>, or j<id>r<n> for its
// n-th dispatch after the first (n from 1 to 9).
func JobKey(job int64, redispatch int) string {
	if redispatch > 0 {
		return fmt.Sprintf("j%dr%d", job, redispatch)
	}
	return fmt.Sprintf("j%d", job)
}

// ParseJobKey returns the job a key names and its dispatch number, or ok false for a key that
// names no job (a run id, or anything malformed).
func ParseJobKey(key string) (job int64, redispatch int, ok bool) {
	m := jobKeyRe().FindStringSubmatch(key)
	if m == nil {
		return 0, 0, false
	}
	if _, err := fmt.Sscan(m[1], &job); err != nil {
		return 0, 0, false
	}
	if m[2] != "" {
		redispatch = int(m[2][1] - '0')
	}
	return job, redispatch, true
}

// IsJobKey reports whether key names a label-routed job rather than a workflow run.
func IsJobKey(key string) bool { return jobKeyRe().MatchString(key) }

// Describe names what a key is for, for state reasons and logs: "run 42" or "job 7 (j7)".
func Describe(key string) string {
	if job, _, ok := ParseJobKey(key); ok {
		return fmt.Sprintf("job %d (%s)", job, key)
	}
	return "run " + key
}

// ValidateAssignmentKey checks what an item's runId may hold: a workflow run id or a job key.
func ValidateAssignmentKey(key string) error {
	if IsJobKey(key) {
		return nil
	}
	if err := ValidateRunID(key); err != nil {
		return fmt.Errorf("%w, or a label-routed job's key (j<job id>)", err)
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
