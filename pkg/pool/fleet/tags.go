package fleet

import (
	"maps"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/hangar-ci/hangar/pkg/contract/names"
)

// The tags Hangar puts on every instance it launches (and its volumes). They all start with
// names.ReservedTagPrefix, which users may not use, and are applied after the users' tags.
const (
	// TagStack names the stack that launched the instance; refresh's orphan search and the IAM
	// conditions of the stack's roles match on it.
	TagStack = "hangar:stack"
	// TagPool names the instance's pool.
	TagPool = "hangar:pool"
	// TagRunID and TagRepository name the run (and its repository) an instance was created for;
	// warm instances have neither.
	TagRunID      = "hangar:run-id"
	TagRepository = "hangar:repository"
	// TagManagedBy is "hangar" on every instance Hangar launched.
	TagManagedBy = "hangar:managed-by"
	// TagWarm is "true" on instances refresh launched for a warm pool.
	TagWarm = "hangar:warm"
	// TagUnrecorded marks an instance whose state item may not exist yet: every launch carries it,
	// and the launcher's caller removes it (MarkRecorded) once the items are written. Refresh looks
	// only at instances still carrying it, past a grace period, to find orphans.
	TagUnrecorded = "hangar:unrecorded"
)

// ManagedBy is the value of TagManagedBy.
const ManagedBy = "hangar"

// ForRun returns the reserved tags of an instance created for a run of repository.
func ForRun(stack, pool, run, repository string) map[string]string {
	return map[string]string{TagStack: stack, TagPool: pool, TagRunID: run, TagRepository: repository, TagManagedBy: ManagedBy}
}

// TagJobs is "true" on instances created for label-routed jobs (each serves its own job, so
// they carry no run or repository).
const TagJobs = "hangar:jobs"

// ForJobs returns the reserved tags of an instance created for label-routed jobs.
func ForJobs(stack, pool string) map[string]string {
	return map[string]string{TagStack: stack, TagPool: pool, TagManagedBy: ManagedBy, TagJobs: "true"}
}

// ForWarmPool returns the reserved tags of a warm instance.
func ForWarmPool(stack, pool string) map[string]string {
	return map[string]string{TagStack: stack, TagPool: pool, TagManagedBy: ManagedBy, TagWarm: "true"}
}

// tags merges the user tags (pool, then request) and then the reserved ones, which win; a user
// tag with the reserved prefix is dropped (validation refuses them earlier).
func tags(req Request) []ec2types.Tag {
	merged := map[string]string{}
	for k, v := range req.Pool.Tags {
		merged[k] = v
	}
	for k, v := range req.Tags {
		if !strings.HasPrefix(strings.ToLower(k), names.ReservedTagPrefix) {
			merged[k] = v
		}
	}
	maps.Copy(merged, req.Reserved)
	merged[TagUnrecorded] = "true"
	keys := slices.Sorted(maps.Keys(merged))
	out := make([]ec2types.Tag, len(keys))
	for i, k := range keys {
		out[i] = ec2types.Tag{Key: aws.String(k), Value: aws.String(merged[k])}
	}
	return out
}
