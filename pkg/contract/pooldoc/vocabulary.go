package pooldoc

import (
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// ValidateMarket checks a market name.
func ValidateMarket(m string) error {
	switch m {
	case MarketSpot, MarketOnDemand, MarketSpotFallback:
		return nil
	}
	return fmt.Errorf("%q: want %s, %s or %s", m, MarketSpot, MarketOnDemand, MarketSpotFallback)
}

// UsageClassOf returns the usage class every instance launched in market has (state.UsageSpot or
// state.UsageOnDemand), or "" for spot-fallback, whose instances may be either.
func UsageClassOf(market string) string {
	switch market {
	case MarketSpot:
		return state.UsageSpot
	case MarketOnDemand:
		return state.UsageOnDemand
	}
	return ""
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
