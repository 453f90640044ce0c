// Package names is Hangar's vocabulary, in one place: what a stack, a pool, a workflow run or a
// label-routed job's key, an instance, a repository, a label, a tag, a runner group and an
// instance type pattern may be called, each with the one check every part applies, whose error
// names the bad value and the accepted form. It imports nothing of Hangar, so that every layer
// may use it.
package names

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// SelfHostedLabel is the label GitHub gives self-hosted runners by default, which jobs may name.
const SelfHostedLabel = "self-hosted"

// ReservedTagPrefix is the tag prefix Hangar keeps for itself.
const ReservedTagPrefix = "hangar:"

var (
	instanceIDRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^i-[0-9a-f]{8,17}$`) })
	poolNameRe   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,46}[a-z0-9])?$`) })
	runIDRe      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[1-9][0-9]{0,19}$`) })
	jobKeyRe     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^j([1-9][0-9]{0,16})(r[1-9])?$`) })
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

// Owner returns the owner part of an owner/name repository.
func Owner(repo string) string {
	owner, _, _ := strings.Cut(repo, "/")
	return owner
}

var typePatternRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9.*?-]{1,64}$`) })

// ValidateTypePattern checks one instance type pattern.
func ValidateTypePattern(p string) error {
	if !typePatternRe().MatchString(p) {
		return fmt.Errorf("instance type pattern %q is malformed: want 1 to 64 of a-z, 0-9, '.', '-', with '*' and '?' as wildcards (e.g. c*, m7g.*, c7i.large)", p)
	}
	return nil
}

var labelRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`) })

// ValidateLabel checks an extra runner label, as a pool or a provision request gives it (the
// runner carries it as <run>-<label>). All digits are refused: such a label could name another
// run.
func ValidateLabel(l string) error {
	if !labelRe().MatchString(l) {
		return fmt.Errorf("%q: want 1 to 64 of letters, digits, '.', '_' and '-'", l)
	}
	if strings.Trim(l, "0123456789") == "" {
		return fmt.Errorf("%q: all digits could name another run; want at least one letter or '.', '_', '-'", l)
	}
	return nil
}

// ValidateJobLabel checks a label that routes jobs (a pool's, or the stack label): what
// ValidateLabel accepts, but not self-hosted, which every self-hosted runner carries and so names
// no pool.
func ValidateJobLabel(l string) error {
	if err := ValidateLabel(l); err != nil {
		return err
	}
	if strings.EqualFold(l, SelfHostedLabel) {
		return fmt.Errorf("%q: every self-hosted runner carries it; want a label of your own", l)
	}
	return nil
}

var tagKeyRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9 +\-=._:/@]{1,128}$`) })

// ValidateTag checks a user tag for instances (a pool's or a provision request's): EC2's rules
// for keys and values, and none of the prefixes reserved for AWS and for Hangar's own tags.
func ValidateTag(key, value string) error {
	lower := strings.ToLower(key)
	switch {
	case strings.HasPrefix(lower, ReservedTagPrefix):
		return fmt.Errorf("%q: the %s prefix is reserved for Hangar's own tags", key, ReservedTagPrefix)
	case !tagKeyRe().MatchString(key) || strings.HasPrefix(lower, "aws:"):
		return fmt.Errorf("%q: want a tag key of 1 to 128 letters, digits, spaces and + - = . _ : / @ that does not start with \"aws:\"", key)
	case len(value) > 256:
		return fmt.Errorf("%q: the value is longer than 256 characters", key)
	}
	return nil
}

var stackRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,62}$`) })

// ValidateRunnerGroup checks an organisation runner group's name.
func ValidateRunnerGroup(name string) error {
	if !runnerGroupRe().MatchString(name) || strings.TrimSpace(name) != name {
		return fmt.Errorf("%q: want an organisation runner group's name (1 to 64 letters, digits, spaces, '.', '_' or '-')", name)
	}
	return nil
}

var runnerGroupRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9 ._-]{1,64}$`) })

// DefaultStack is the stack's name when none is given.
const DefaultStack = "hangar"

// ValidateStack checks a stack's name (it names the SSM path of the stack's pool documents).
func ValidateStack(name string) error {
	if !stackRe().MatchString(name) {
		return fmt.Errorf("%q: want the Hangar stack's name (1 to 63 letters, digits and '-', starting with a letter or digit)", name)
	}
	return nil
}

// ValidateRepoPattern checks an allowed-repositories entry (a pool's allowedRepositories, the
// stack configuration's github.repositories): owner/name or owner/*.
func ValidateRepoPattern(p string) error {
	if !repoPatternRe().MatchString(p) {
		return fmt.Errorf("%q: want owner/name or owner/*", p)
	}
	return nil
}

var repoPatternRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.-]+/([A-Za-z0-9_.-]+|\*)$`) })

// ValidateRepository checks a repository's full name as GitHub spells it (GITHUB_REPOSITORY):
// owner/name, the owner 1 to 39 letters, digits and '-' starting with a letter or digit, the
// name 1 to 100 letters, digits, '_', '.' and '-'.
func ValidateRepository(repo string) error {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || !ownerRe().MatchString(owner) || !repoNameRe().MatchString(name) {
		return fmt.Errorf("repository %q: want owner/name", repo)
	}
	return nil
}

var (
	ownerRe    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$`) })
	repoNameRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}$`) })
)
