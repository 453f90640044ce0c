package state

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/hangar-ci/hangar/pkg/contract/names"
)

// maxRunnerName is GitHub's limit on a runner's name.
const maxRunnerName = 64

// maxStackInName is the longest stack name written into runner names as it is; a longer one is
// replaced by a hash so that prefix + instance id (19) + run id (up to 20) stays within 64.
const maxStackInName = maxRunnerName - len("hangar-") - 1 - 19 - 1 - 20

var runnerPrefixRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^hangar-[A-Za-z0-9-]{1,16}-$`) })

// RunnerNames names the runners of one stack: hangar-<stack>-<instance id>-<run id>. The stack
// in the name keeps each stack's cleanup off another stack's runners in the same repository or
// organisation; the instance and the run make a stale registration of the same pair replace,
// not duplicate, and tell whose a runner is.
type RunnerNames struct{ prefix string }

// RunnerNamesOf returns the runner names of stack (a stack name longer than 16 characters is
// written as the first 16 hex digits of its SHA-256).
func RunnerNamesOf(stack string) RunnerNames {
	tag := stack
	if len(tag) > maxStackInName {
		sum := sha256.Sum256([]byte(stack))
		tag = hex.EncodeToString(sum[:])[:maxStackInName]
	}
	return RunnerNames{prefix: "hangar-" + tag + "-"}
}

// ParseRunnerPrefix returns the runner names whose prefix an assignment carries (runnerPrefix).
func ParseRunnerPrefix(prefix string) (RunnerNames, error) {
	if !runnerPrefixRe().MatchString(prefix) {
		return RunnerNames{}, fmt.Errorf("runner name prefix %q: want hangar-<stack>- as provision writes it", prefix)
	}
	return RunnerNames{prefix: prefix}, nil
}

// Prefix is what every runner name of the stack starts with.
func (n RunnerNames) Prefix() string { return n.prefix }

// Name is the name of the runner instance id registers for run.
func (n RunnerNames) Name(instanceID, run string) string { return n.prefix + instanceID + "-" + run }

// Parse splits a name made by Name; ok is false for any other name, another stack's included.
func (n RunnerNames) Parse(name string) (instanceID, run string, ok bool) {
	rest, found := strings.CutPrefix(name, n.prefix)
	if !found || n.prefix == "" {
		return "", "", false
	}
	i := strings.LastIndex(rest, "-")
	if i < 0 {
		return "", "", false
	}
	instanceID, run = rest[:i], rest[i+1:]
	if names.ValidateInstanceID(instanceID) != nil || names.ValidateAssignmentKey(run) != nil {
		return "", "", false
	}
	return instanceID, run, true
}

// RepositoryGroup names the organisation runner group the stack makes for one repository's
// just-in-time runners (by the repository's id, which a rename keeps): a group open to that
// repository alone, so that GitHub offers its runners to no other repository's jobs.
func (r RunnerNames) RepositoryGroup(repoID int64) string {
	return fmt.Sprintf("%srepo-%d", r.prefix, repoID)
}
