package pooldoc

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghurl"
)

var (
	instanceTypeRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9-]+\.[a-z0-9-]+$`) })
	subnetRe       = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^subnet-[0-9a-f]{8,17}$`) })
	templateRe     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^lt-[0-9a-f]{8,17}$`) })
	templateVerRe  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([1-9][0-9]*|\$Latest|\$Default)$`) })
	versionRe      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`) })
	sha256Re       = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{64}$`) })
	userRe         = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`) })
	hhmmRe         = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([01][0-9]|2[0-3]):[0-5][0-9]$`) })
)

// Validate checks every field; the error names the field and the bad value. All problems are
// reported at once.
func (d *Document) Validate() error {
	var errs []error
	bad := func(field string, format string, a ...any) {
		errs = append(errs, fmt.Errorf("pool %q: %s: %s", d.Name, field, fmt.Sprintf(format, a...)))
	}
	if d.SchemaVersion != SchemaVersion {
		bad("schemaVersion", "%d: this Hangar reads version %d", d.SchemaVersion, SchemaVersion)
	}
	if err := names.ValidatePool(d.Name); err != nil {
		bad("name", "%v", err)
	}
	if err := d.StateAccount().Validate(); err != nil {
		bad("partition/region/account", "%v", err)
	}
	if d.Table == "" {
		bad("table", "empty: want the state table's name")
	}
	if d.HistoryDays < 0 || d.HistoryDays > MaxHistoryDays {
		bad("historyDays", "%d: want 1 to %d days (or leave it out: %d)", d.HistoryDays, MaxHistoryDays, int(state.DefaultHistoryRetention/(24*time.Hour)))
	}
	if d.MaxInstances < 0 || d.MaxInstances > MaxInstancesLimit {
		bad("maxInstances", "%d: want 1 to %d (or leave it out: no bound)", d.MaxInstances, MaxInstancesLimit)
	}
	for i, w := range d.Warm.Schedules {
		if d.MaxInstances > 0 && w.Hot+w.Stopped > d.MaxInstances {
			bad(fmt.Sprintf("warm.schedules[%d]", i), "hot %d + stopped %d is more than maxInstances %d: the warm pool could never be filled",
				w.Hot, w.Stopped, d.MaxInstances)
		}
	}
	if c := d.StackCap; c != nil {
		if c.MaxInstances < 1 || c.MaxInstances > MaxInstancesLimit {
			bad("stackCap.maxInstances", "%d: want 1 to %d", c.MaxInstances, MaxInstancesLimit)
		}
		if !slices.Contains(c.Pools, d.Name) {
			bad("stackCap.pools", "%v: want the stack's pools, this one among them", c.Pools)
		}
		for _, p := range c.Pools {
			if err := names.ValidatePool(p); err != nil {
				bad("stackCap.pools", "%v", err)
			}
		}
	}
	if u, err := url.Parse(d.QueueURL); d.QueueURL == "" || err != nil || u.Scheme == "" || u.Host == "" {
		bad("queueUrl", "%q: want the pool queue's URL", d.QueueURL)
	}
	if err := ghurl.CheckServer(d.GitHubURL); err != nil {
		bad("githubUrl", "%v (the GitHub server the pool's runners register with)", err)
	}
	if !templateRe().MatchString(d.LaunchTemplate.ID) {
		bad("launchTemplate.id", "%q: want lt- and hex digits", d.LaunchTemplate.ID)
	}
	if !templateVerRe().MatchString(d.LaunchTemplate.Version) {
		bad("launchTemplate.version", "%q: want a version number, $Latest or $Default", d.LaunchTemplate.Version)
	}
	if d.SpecHash == "" {
		bad("specHash", "empty: want the hash of what the pool launches")
	}
	switch r := d.InstanceRequirements; {
	case r == nil && len(d.InstanceTypes) == 0:
		bad("instanceTypes", "empty: want at least one instance type, or instanceRequirements (vCPU and memory)")
	case r != nil && len(d.InstanceTypes) > 0:
		bad("instanceTypes", "%v with instanceRequirements: want one or the other", d.InstanceTypes)
	case r != nil:
		for _, p := range r.problems() {
			errs = append(errs, fmt.Errorf("pool %q: %s", d.Name, p))
		}
	}
	for _, t := range d.InstanceTypes {
		if !instanceTypeRe().MatchString(t) {
			bad("instanceTypes", "%q: want an instance type such as c7i.large", t)
		}
	}
	if len(d.Subnets) == 0 {
		bad("subnets", "empty: want at least one subnet")
	}
	for _, s := range d.Subnets {
		if !subnetRe().MatchString(s.ID) || s.AZ == "" {
			bad("subnets", "{id %q, az %q}: want subnet-<hex> and its availability zone", s.ID, s.AZ)
		}
	}
	if err := ValidateMarket(d.Market); err != nil {
		bad("market", "%v", err)
	}
	switch d.AllocationStrategy {
	case AllocationCost, AllocationPriority:
	default:
		bad("allocationStrategy", "%q: want cost or priority", d.AllocationStrategy)
	}
	for _, l := range d.Labels {
		if err := names.ValidateLabel(l); err != nil {
			bad("labels", "%v", err)
		}
	}
	if len(d.AllowedRepositories) == 0 {
		bad("allowedRepositories", "empty: want the repositories (owner/name or owner/*) that may use the pool; the stack writes its github.repositories when the pool names none")
	}
	for _, r := range d.AllowedRepositories {
		if err := names.ValidateRepoPattern(r); err != nil {
			bad("allowedRepositories", "%v", err)
		}
	}
	if d.RunnerGroup != "" {
		if err := names.ValidateRunnerGroup(d.RunnerGroup); err != nil {
			bad("runnerGroup", "%v", err)
		}
	}
	if _, err := state.ParseReuse(string(d.Reuse)); err != nil {
		bad("reuse", "%v", err)
	} else if d.Runner.Sudo && (d.Reuse == state.ReuseOwner || d.Reuse == state.ReuseAny) {
		bad("reuse", "%q with runner.sudo: a runner user with sudo can leave anything behind for the next run; want repository or never", d.Reuse)
	}
	for _, k := range slices.Sorted(maps.Keys(d.Tags)) {
		if err := names.ValidateTag(k, d.Tags[k]); err != nil {
			bad("tags", "%v", err)
		}
	}
	for _, t := range []struct {
		name string
		v    Duration
	}{{"created", d.Timeouts.Created}, {"claimed", d.Timeouts.Claimed}, {"running", d.Timeouts.Running},
		{"idle", d.Timeouts.Idle}, {"stopped", d.Timeouts.Stopped}} {
		if t.v.D() <= 0 || t.v.D() > maxTimeout {
			bad("timeouts."+t.name, "%s: want more than 0 and at most %s", t.v.D(), maxTimeout)
		}
	}
	errs = append(errs, d.Warm.validate(d.Name)...)
	errs = append(errs, d.Runner.validate(d.Name)...)
	if d.Jobs != nil {
		for _, p := range d.Jobs.problems() {
			bad("jobs."+p.field, "%s", p.msg)
		}
		if u, err := url.Parse(d.ReturnsQueueURL); d.ReturnsQueueURL == "" || err != nil || u.Scheme == "" || u.Host == "" {
			bad("returnsQueueUrl", "%q: want the stack's returns queue URL (a pool serving label-routed jobs needs it)", d.ReturnsQueueURL)
		}
		for field, v := range map[string]string{"jobs.queueUrl": d.Jobs.QueueURL, "jobs.deadLetterQueueUrl": d.Jobs.DeadLetterQueueURL} {
			if u, err := url.Parse(v); v != "" && (err != nil || u.Scheme == "" || u.Host == "") {
				bad(field, "%q: want the stack's queue URL, or nothing", v)
			}
		}
	}
	return errors.Join(errs...)
}

// MaxJobLabels bounds a pool's job labels.
const MaxJobLabels = 10

type problem struct{ field, msg string }

// problems checks a pool's label-routing settings.
func (j *Jobs) problems() []problem {
	var out []problem
	if err := names.ValidateJobLabel(j.StackLabel); err != nil {
		out = append(out, problem{"stackLabel", err.Error()})
	}
	if len(j.Labels) == 0 || len(j.Labels) > MaxJobLabels {
		out = append(out, problem{"labels", fmt.Sprintf("%d labels: want 1 to %d", len(j.Labels), MaxJobLabels)})
	}
	seen := map[string]bool{}
	for _, l := range j.Labels {
		switch err := names.ValidateJobLabel(l); {
		case err != nil:
			out = append(out, problem{"labels", err.Error()})
		case strings.EqualFold(l, j.StackLabel):
			out = append(out, problem{"labels", fmt.Sprintf("%q is the stack label: every job names it; want labels that tell the pools apart", l)})
		case seen[strings.ToLower(l)]:
			out = append(out, problem{"labels", fmt.Sprintf("%q twice (labels compare without regard to case)", l)})
		}
		seen[strings.ToLower(l)] = true
	}
	seenInst := map[int64]bool{}
	for _, id := range j.Installations {
		switch {
		case id <= 0:
			out = append(out, problem{"installations", fmt.Sprintf("%d: want the App's installation ids (positive numbers)", id)})
		case seenInst[id]:
			out = append(out, problem{"installations", fmt.Sprintf("%d twice", id)})
		}
		seenInst[id] = true
	}
	switch j.Scope {
	case "", JobScopeRepository, JobScopeOrganization:
	default:
		out = append(out, problem{"scope", fmt.Sprintf("%q: want repository or organization", j.Scope)})
	}
	return out
}

func (r Runner) validate(pool string) []error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("pool %q: runner.%s: %s", pool, field, fmt.Sprintf(format, a...)))
	}
	if !userRe().MatchString(r.User) || r.User == "root" {
		bad("user", "%q: want an unprivileged user name", r.User)
	}
	switch r.LogInSummary {
	case "", LogInSummaryAuto, LogInSummaryAlways, LogInSummaryNever:
	default:
		bad("logInSummary", "%q: want auto, always or never", r.LogInSummary)
	}
	if len(r.WritableDirs) > maxWritableDirs {
		bad("writableDirs", "%d directories: want at most %d", len(r.WritableDirs), maxWritableDirs)
	}
	for _, d := range r.WritableDirs {
		if err := checkWritableDir(d); err != nil {
			bad("writableDirs", "%v", err)
		}
	}
	if r.Version == "" {
		if r.BaseURL != "" || len(r.SHA256) > 0 {
			bad("version", "empty, but baseUrl or sha256 set: set the version to download, or none of them for a runner baked into the AMI")
		}
		return errs
	}
	if !versionRe().MatchString(r.Version) {
		bad("version", "%q: want an actions/runner release such as 2.321.0", r.Version)
	}
	u, err := url.Parse(r.BaseURL)
	switch {
	case err != nil || u.Host == "":
		bad("baseUrl", "%q: want an https URL", r.BaseURL)
	case u.Scheme == "http" && !isLoopback(u.Hostname()):
		bad("baseUrl", "%q: plain http only for a loopback host; want https", r.BaseURL)
	case u.Scheme != "https" && u.Scheme != "http":
		bad("baseUrl", "%q: want an https URL", r.BaseURL)
	}
	if len(r.SHA256) == 0 {
		bad("sha256", "empty: want the tarball's SHA-256 for each arch (x64, arm64) the pool runs")
	}
	for arch, sum := range r.SHA256 {
		if arch != "x64" && arch != "arm64" {
			bad("sha256", "arch %q: want x64 or arm64", arch)
		}
		if !sha256Re().MatchString(sum) {
			bad("sha256", "%s: %q: want 64 lowercase hex digits", arch, sum)
		}
	}
	return errs
}

// maxWritableDirs bounds runner.writableDirs.
const maxWritableDirs = 32

// checkWritableDir refuses a writable directory the agent must not sweep as root: a relative or
// unclean path, /, or one in the kernel's and the system's own trees.
func checkWritableDir(d string) error {
	if !path.IsAbs(d) || path.Clean(d) != d || d == "/" {
		return fmt.Errorf("%q: want a clean absolute path other than /", d)
	}
	for _, sys := range []string{"/proc", "/sys", "/dev", "/run", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/root"} {
		if d == sys || strings.HasPrefix(d, sys+"/") {
			return fmt.Errorf("%q: a directory under %s is not one jobs may write to", d, sys)
		}
	}
	return nil
}

func isLoopback(host string) bool {
	return host == "localhost" || host == "::1" || strings.HasPrefix(host, "127.")
}

// RepoAllowed reports whether repository owner/name may use the pool: whether one of its
// allowedRepositories matches it. A document without any admits no repository.
func (d *Document) RepoAllowed(repo string) bool {
	for _, p := range d.AllowedRepositories {
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(repo)); ok {
			return true
		}
	}
	return false
}

// parseHHMM returns minutes after midnight.
func parseHHMM(s string) (int, error) {
	if !hhmmRe().MatchString(s) {
		return 0, fmt.Errorf("%q: want HH:MM (24-hour)", s)
	}
	t, _ := time.Parse("15:04", s)
	return t.Hour()*60 + t.Minute(), nil
}
