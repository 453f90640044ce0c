package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/platform/ghurl"
)

// App is the GitHub App side of label-routed jobs (docs/labels.md): the stack label, the App's
// two secrets, and how the jobs queue feeds the dispatcher. It matters only when some pool has
// jobs.
type App struct {
	// Label is the stack label every label-routed job must carry in runs-on (default: the
	// stack's name); jobs without it are other runners' and ignored.
	Label string `json:"label,omitempty"`
	// AppSecretARN names an existing Secrets Manager secret holding the App's
	// {"appId", "privateKey"}; empty: the stack creates <stack>-github-app, empty, to be filled in.
	AppSecretARN string `json:"appSecretArn,omitempty"`
	// WebhookSecretARN names an existing secret holding the App's webhook secret; empty: the
	// stack creates <stack>-webhook-secret with a generated value, to be copied into the App.
	WebhookSecretARN string `json:"webhookSecretArn,omitempty"`
	// BatchSize is the most jobs the jobs queue hands the dispatcher at once (default 10, 1 to
	// 100): a burst's overflow is created with one CreateFleet per pool and batch.
	BatchSize int `json:"batchSize,omitempty"`
	// BatchWindow is how long the jobs queue gathers a batch (default 0s, at most 5s, whole
	// seconds): it adds its length to every job's wait, so it stays short.
	BatchWindow pooldoc.Duration `json:"batchWindow,omitempty"`
}

// Jobs is how a pool serves label-routed jobs (the pool document's jobs, without the stack
// label, which is the app's).
type Jobs struct {
	// Labels name the pool in runs-on, besides the stack label (1 to 10).
	Labels []string `json:"labels"`
	// Scope is where the pool's just-in-time runners are registered: repository (default) or
	// organization.
	Scope string `json:"scope,omitempty"`
}

// Defaults and bounds of the app's batching (Lambda's SQS event source: at most 10 messages
// without a batching window of 1 s or more).
const (
	DefaultBatchSize  = 10
	MaxBatchSize      = 100
	MaxBatchWindow    = 5 * time.Second
	unwindowedBatches = 10
)

// ServesJobs reports whether some pool serves label-routed jobs: only then does the stack make
// the App's secrets, queues and functions.
func (c *Config) ServesJobs() bool {
	return slices.ContainsFunc(c.Pools, func(p Pool) bool { return p.Jobs != nil })
}

// stackLabel is the app's label ("" without an app).
func (c *Config) stackLabel() string {
	if c.App == nil {
		return ""
	}
	return c.App.Label
}

func (c *Config) applyAppDefaults() {
	if c.App == nil && c.ServesJobs() {
		c.App = &App{}
	}
	if c.App == nil {
		return
	}
	if c.App.Label == "" {
		c.App.Label = c.Stack
	}
	if c.App.BatchSize == 0 {
		c.App.BatchSize = DefaultBatchSize
	}
}

func (j *Jobs) applyDefaults() {
	if j == nil {
		return
	}
	if j.Scope == "" {
		j.Scope = pooldoc.JobScopeRepository
	}
}

var secretArnRe = regexp.MustCompile(`^arn:aws[a-z-]*:secretsmanager:[a-z]{2}(-[a-z]+)+-[0-9]:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+$`)

// validateJobs checks the app and what no single pool can: that pools' labels differ. The
// pools' own jobs settings are checked through their documents (Pool.validate).
func (c *Config) validateJobs() []error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, a...)))
	}
	a := c.App
	switch {
	case a == nil && c.ServesJobs():
		bad("app", "missing while pools have jobs (ApplyDefaults fills it in)")
	case a == nil:
		return nil
	case !c.ServesJobs():
		bad("app", "no pool has jobs: label-routed jobs need at least one pool with jobs.labels; leave app out to serve the steps only")
	}
	if a != nil {
		if err := names.ValidateJobLabel(a.Label); err != nil {
			hint := ""
			if a.Label == c.Stack {
				hint = " (the stack's name, app.label's default: set app.label)"
			}
			bad("app.label", "%v%s", err, hint)
		}
		for _, s := range []struct{ field, arn string }{{"app.appSecretArn", a.AppSecretARN}, {"app.webhookSecretArn", a.WebhookSecretARN}} {
			if s.arn != "" && !secretArnRe.MatchString(s.arn) {
				bad(s.field, "%q: want a Secrets Manager secret's ARN, arn:<partition>:secretsmanager:<region>:<account>:secret:<name>, or leave it out for the stack to create one", s.arn)
			}
		}
		if a.BatchSize < 1 || a.BatchSize > MaxBatchSize {
			bad("app.batchSize", "%d: want 1 to %d", a.BatchSize, MaxBatchSize)
		}
		switch w := a.BatchWindow.D(); {
		case w < 0 || w > MaxBatchWindow:
			bad("app.batchWindow", "%s: want 0s to %s (every job waits for the window)", w, MaxBatchWindow)
		case w%time.Second != 0:
			bad("app.batchWindow", "%s: want whole seconds", w)
		case a.BatchSize > unwindowedBatches && w < time.Second:
			bad("app.batchWindow", "%s with batchSize %d: SQS hands Lambda more than %d messages at once only with a batching window of at least 1s; set batchWindow to 1s or more, or batchSize to %d or less",
				w, a.BatchSize, unwindowedBatches, unwindowedBatches)
		}
	}
	// No two pools with the same labels: a job naming them could go to either (docs/labels.md).
	seen := map[string]int{}
	for i, p := range c.Pools {
		if p.Jobs == nil || len(p.Jobs.Labels) == 0 {
			continue
		}
		key := labelSet(p.Jobs.Labels)
		if first, ok := seen[key]; ok {
			bad(fmt.Sprintf("pools[%d].jobs.labels", i), "%v: the same labels as pools[%d] (%s), ignoring case and order: a job could not tell the two apart",
				p.Jobs.Labels, first, c.Pools[first].Name)
			continue
		}
		seen[key] = i
	}
	return errs
}

// labelSet is a set of labels as routing compares them: without regard to case or order.
func labelSet(labels []string) string {
	var out []string
	for _, l := range labels {
		out = append(out, strings.ToLower(l))
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), "\n")
}

// APIURL is the REST API of the GitHub server: https://api.github.com for github.com, and
// <server>/api/v3 for an enterprise server.
func (g GitHub) APIURL() string { return ghurl.APIURL(g.ServerURL) }
