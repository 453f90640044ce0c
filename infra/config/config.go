package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghurl"
)

// Config is a whole deployment.
type Config struct {
	// Stack names the deployment: the CloudFormation stack, the SSM path /hangar/<stack>/, the
	// hangar:stack tag, the runner names.
	Stack  string `json:"stack"`
	GitHub GitHub `json:"github"`
	// Refresh is the refresh function's schedule.
	Refresh Refresh `json:"refresh"`
	// App is the GitHub App side of label-routed jobs (docs/labels.md): nil when no pool serves
	// them (ApplyDefaults fills it in when some pool has jobs and the file has no app).
	App *App `json:"app,omitempty"`
	// History is how long the stack keeps what the operator's command reads after the fact.
	History History `json:"history,omitempty"`
	// Alarms says who is told when one of the stack's alarms fires.
	Alarms Alarms `json:"alarms,omitempty"`
	// MaxInstances bounds the live instances of all the pools together (0: no bound but each
	// pool's maxInstances and the account's quotas).
	MaxInstances int `json:"maxInstances,omitempty"`
	// Lambda is how the stack's functions use the account's Lambda concurrency.
	Lambda Lambda `json:"lambda,omitempty"`
	Pools  []Pool `json:"pools"`
}

// Lambda says whether the stack's functions reserve concurrency of the account's.
type Lambda struct {
	// ReserveConcurrency reserves each function's concurrency (default true): the public webhook
	// is bounded under a flood and the dispatcher always has its share. An account whose quota
	// cannot hold the reservations and the 100 executions Lambda keeps unreserved (a new account
	// may have 10 in all) deploys with false until its quota is raised.
	ReserveConcurrency *bool `json:"reserveConcurrency,omitempty"`
}

// Reserves reports whether the functions reserve concurrency.
func (l Lambda) Reserves() bool { return l.ReserveConcurrency == nil || *l.ReserveConcurrency }

// History says how long run records and ended instances' items are kept (docs/design.md §12).
type History struct {
	// Days before DynamoDB's TTL removes them (default 90).
	Days int `json:"days,omitempty"`
}

// Alarms says where the stack's alarms go: every alarm notifies one SNS topic, the stack's own
// (<stack>-alarms) or TopicARN, to which Emails are subscribed.
type Alarms struct {
	// Emails are subscribed to the topic (each confirms by the link SNS mails it).
	Emails []string `json:"emails,omitempty"`
	// TopicARN is an existing SNS topic to notify instead of a topic of the stack's own.
	TopicARN string `json:"topicArn,omitempty"`
}

// GitHub says who may use the stack.
type GitHub struct {
	// Repositories may assume the control-plane role through GitHub OIDC: owner/name, or owner/*
	// for every repository of an owner.
	Repositories []string `json:"repositories"`
	// Installations are the GitHub App installations whose label-routed jobs the stack serves
	// (ids); empty: any installation, and the repository alone decides. Together with
	// Repositories they are the stack's trust set (docs/security.md).
	Installations []int64 `json:"installations,omitempty"`
	// OIDCProviderARN imports the account's existing GitHub OIDC provider (an account has at most
	// one per URL); empty creates it.
	OIDCProviderARN string `json:"oidcProviderArn,omitempty"`
	// ServerURL is the GitHub server the stack serves: https://github.com (the default) or an
	// enterprise server's https://<host>. Every pool document pins it (githubUrl): provision
	// refuses workflows of another server, and agents send registration tokens nowhere else.
	ServerURL string `json:"serverUrl,omitempty"`
}

// Refresh is the refresh function's schedule.
type Refresh struct {
	// Schedule is an EventBridge rate or cron expression (default rate(1 minute)).
	Schedule string `json:"schedule,omitempty"`
}

// Pool is one pool: what its instances are, and the pool document settings.
type Pool struct {
	Name          string   `json:"name"`
	InstanceTypes []string `json:"instanceTypes,omitempty"`
	// InstanceRequirements choose the types by vCPU and memory instead (arch: the image's).
	InstanceRequirements *pooldoc.Requirements `json:"instanceRequirements,omitempty"`
	Market               string                `json:"market,omitempty"`
	AllocationStrategy   string                `json:"allocationStrategy,omitempty"`
	Subnets              []pooldoc.Subnet      `json:"subnets,omitempty"`
	// VPC finds the subnets by a lookup instead (exactly one of subnets and vpc).
	VPC *VPC `json:"vpc,omitempty"`
	// VPCID is the VPC of the listed subnets (vpc-…), in which the stack makes the pool's own
	// security group; needed with subnets and without securityGroups.
	VPCID string `json:"vpcId,omitempty"`
	// SecurityGroups are the instances' security groups (sg-…); none: a group of the pool's own,
	// made by the stack, with no ingress.
	SecurityGroups []string `json:"securityGroups,omitempty"`
	Image          Image    `json:"image"`
	Disk           Disk     `json:"disk,omitempty"`
	// MetadataHopLimit is the IMDSv2 response hop limit: 1 (default) keeps containers off the
	// metadata service; 2 lets them reach it (with runner.metadataAccess).
	MetadataHopLimit    int               `json:"metadataHopLimit,omitempty"`
	Labels              []string          `json:"labels,omitempty"`
	RunnerGroup         string            `json:"runnerGroup,omitempty"`
	Reuse               state.Reuse       `json:"reuse,omitempty"`
	AllowedRepositories []string          `json:"allowedRepositories,omitempty"`
	Tags                map[string]string `json:"tags,omitempty"`
	Timeouts            pooldoc.Timeouts  `json:"timeouts,omitempty"`
	Warm                pooldoc.Warm      `json:"warm,omitempty"`
	Runner              pooldoc.Runner    `json:"runner,omitempty"`
	// MaxInstances bounds the pool's live instances (0: no bound but the stack's).
	MaxInstances int `json:"maxInstances,omitempty"`
	// Jobs makes the pool serve label-routed jobs; nil: the steps only.
	Jobs *Jobs `json:"jobs,omitempty"`
}

// VPC is a lookup of the pool's subnets, made by the CDK CLI at synth (cached in
// cdk.context.json): the subnets of one type in a VPC named by id, or in the default VPC.
type VPC struct {
	ID      string `json:"id,omitempty"`
	Default bool   `json:"default,omitempty"`
	// SubnetType is private (default: private with a route out, for GitHub), isolated or public.
	SubnetType string `json:"subnetType,omitempty"`
}

// Subnet types of a VPC lookup.
const (
	SubnetsPrivate  = "private"
	SubnetsIsolated = "isolated"
	SubnetsPublic   = "public"
)

// Image is the pool's AMI: an id, or an SSM parameter that names one (resolved at deploy).
type Image struct {
	AMI          string `json:"ami,omitempty"`
	SSMParameter string `json:"ssmParameter,omitempty"`
	// Arch is x64 or arm64: which agent build and runner checksum the instances use.
	Arch string `json:"arch"`
}

// Disk is the root volume: encrypted gp3.
type Disk struct {
	SizeGiB int `json:"sizeGiB,omitempty"`
}

// Defaults.
const (
	DefaultSchedule = "rate(1 minute)"
	// DefaultHistoryDays is history.days unless set.
	DefaultHistoryDays = int(state.DefaultHistoryRetention / (24 * time.Hour))
	DefaultDiskGiB     = 30
)

// Load reads and validates the file at path.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the Hangar config: %w", err)
	}
	cfg, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes YAML (or JSON), refusing unknown fields, applies defaults and validates,
// reporting every problem at once.
func Parse(b []byte) (*Config, error) {
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w (see docs/configuration.md)", err)
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// ApplyDefaults fills in what the file leaves out; Validate then changes nothing.
func (c *Config) ApplyDefaults() {
	if c.Refresh.Schedule == "" {
		c.Refresh.Schedule = DefaultSchedule
	}
	if c.History.Days == 0 {
		c.History.Days = DefaultHistoryDays
	}
	if c.GitHub.ServerURL == "" {
		c.GitHub.ServerURL = pooldoc.DefaultGitHubURL
	}
	for i := range c.Pools {
		p := &c.Pools[i]
		if p.Disk.SizeGiB == 0 {
			p.Disk.SizeGiB = DefaultDiskGiB
		}
		if p.MetadataHopLimit == 0 {
			p.MetadataHopLimit = 1
		}
		if p.Market == "" {
			p.Market = pooldoc.MarketSpotFallback
		}
		if p.VPC != nil && p.VPC.SubnetType == "" {
			p.VPC.SubnetType = SubnetsPrivate
		}
		if r := p.InstanceRequirements; r != nil && r.Arch == "" {
			r.Arch = p.Image.Arch
		}
		p.Jobs.applyDefaults()
	}
	c.applyAppDefaults()
}

var (
	scheduleRe = regexp.MustCompile(`^(rate\([1-9][0-9]* (minute|minutes|hour|hours)\)|cron\([^()]+\))$`)
	amiRe      = regexp.MustCompile(`^ami-[0-9a-f]{8,17}$`)
	sgRe       = regexp.MustCompile(`^sg-[0-9a-f]{8,17}$`)
	vpcRe      = regexp.MustCompile(`^vpc-[0-9a-f]{8,17}$`)
	ssmNameRe  = regexp.MustCompile(`^/[A-Za-z0-9_./-]+$`)
	topicArnRe = regexp.MustCompile(`^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]{1,256}$`)
	emailRe    = regexp.MustCompile(`^[^@\s]+@[^@\s]+\.[^@\s]+$`)
	oidcArnRe  = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:oidc-provider/token\.actions\.githubusercontent\.com$`)
)

// Validate checks every field; each problem names the field and the bad value.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, a...)))
	}
	if err := names.ValidateStack(c.Stack); err != nil {
		bad("stack", "%v", err)
	}
	if len(c.GitHub.Repositories) == 0 {
		bad("github.repositories", "empty: want the repositories (owner/name or owner/*) whose workflows may use the stack")
	}
	for _, r := range c.GitHub.Repositories {
		if err := names.ValidateRepoPattern(r); err != nil {
			bad("github.repositories", "%v", err)
		}
	}
	for i, id := range c.GitHub.Installations {
		if id <= 0 || slices.Contains(c.GitHub.Installations[:i], id) {
			bad("github.installations", "%d: want distinct App installation ids (positive numbers, from the installation's settings page URL)", id)
		}
	}
	if c.GitHub.OIDCProviderARN != "" && !oidcArnRe.MatchString(c.GitHub.OIDCProviderARN) {
		bad("github.oidcProviderArn", "%q: want the ARN of the token.actions.githubusercontent.com OIDC provider, or leave it out to create one", c.GitHub.OIDCProviderARN)
	}
	if err := ghurl.CheckServer(c.GitHub.ServerURL); err != nil {
		bad("github.serverUrl", "%v (the GitHub server whose workflows use the stack)", err)
	}
	if a := c.Alarms.TopicARN; a != "" && !topicArnRe.MatchString(a) {
		bad("alarms.topicArn", "%q: want an SNS topic's ARN (arn:aws:sns:<region>:<account>:<name>), or leave it out for a topic of the stack's own", a)
	}
	for i, e := range c.Alarms.Emails {
		if !emailRe.MatchString(e) || slices.Contains(c.Alarms.Emails[:i], e) {
			bad("alarms.emails", "%q: want distinct email addresses (name@example.com)", e)
		}
	}
	if !scheduleRe.MatchString(c.Refresh.Schedule) {
		bad("refresh.schedule", "%q: want an EventBridge rate(N minutes) or cron(...) expression", c.Refresh.Schedule)
	}
	if c.History.Days < 1 || c.History.Days > pooldoc.MaxHistoryDays {
		bad("history.days", "%d: want 1 to %d (how many days run records and ended instances are kept; default %d)", c.History.Days, pooldoc.MaxHistoryDays, DefaultHistoryDays)
	}
	if c.MaxInstances < 0 || c.MaxInstances > pooldoc.MaxInstancesLimit {
		bad("maxInstances", "%d: want 1 to %d (or leave it out: no bound for the stack)", c.MaxInstances, pooldoc.MaxInstancesLimit)
	}
	if len(c.Pools) == 0 {
		bad("pools", "empty: want at least one pool")
	}
	var names []string
	for i := range c.Pools {
		p := &c.Pools[i]
		if slices.Contains(names, p.Name) {
			bad(fmt.Sprintf("pools[%d].name", i), "%q: two pools have this name", p.Name)
		}
		names = append(names, p.Name)
		errs = append(errs, p.validate(i, c.GitHub, c.stackLabel())...)
	}
	errs = append(errs, c.validateJobs()...)
	return errors.Join(errs...)
}

// validate checks pool i; stackLabel is the app's label ("" when no pool serves jobs).
func (p *Pool) validate(i int, gh GitHub, stackLabel string) []error {
	field := func(f string) string { return fmt.Sprintf("pools[%d].%s", i, f) }
	var errs []error
	bad := func(f, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field(f), fmt.Sprintf(format, a...)))
	}
	switch {
	case (p.Image.AMI == "") == (p.Image.SSMParameter == ""):
		bad("image", "want exactly one of ami (ami-…) or ssmParameter (such as /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64)")
	case p.Image.AMI != "" && !amiRe.MatchString(p.Image.AMI):
		bad("image.ami", "%q: want ami- and hex digits", p.Image.AMI)
	case p.Image.SSMParameter != "" && !ssmNameRe.MatchString(p.Image.SSMParameter):
		bad("image.ssmParameter", "%q: want an SSM parameter name starting with /", p.Image.SSMParameter)
	}
	if p.Image.Arch != "x64" && p.Image.Arch != "arm64" {
		bad("image.arch", "%q: want x64 or arm64", p.Image.Arch)
	}
	switch v := p.VPC; {
	case v != nil && len(p.Subnets) > 0:
		bad("vpc", "with subnets: want one or the other")
	case v != nil && (v.ID == "") == !v.Default:
		bad("vpc", "want exactly one of id (vpc-…) or default: true")
	case v != nil && v.ID != "" && !vpcRe.MatchString(v.ID):
		bad("vpc.id", "%q: want vpc- and hex digits", v.ID)
	}
	switch {
	case p.VPCID != "" && p.VPC != nil:
		bad("vpcId", "%q with vpc: the lookup finds the VPC; leave vpcId out", p.VPCID)
	case p.VPCID != "" && !vpcRe.MatchString(p.VPCID):
		bad("vpcId", "%q: want vpc- and hex digits", p.VPCID)
	case p.VPCID == "" && len(p.Subnets) > 0 && len(p.SecurityGroups) == 0:
		bad("vpcId", "empty: the pool lists subnets and no securityGroups, so the stack makes it a security group with no ingress, in the subnets' VPC: name it (vpc-…), or name securityGroups")
	}
	if v := p.VPC; v != nil && !slices.Contains([]string{SubnetsPrivate, SubnetsIsolated, SubnetsPublic}, v.SubnetType) {
		bad("vpc.subnetType", "%q: want private, isolated or public", v.SubnetType)
	}
	if r := p.InstanceRequirements; r != nil && r.Arch != p.Image.Arch {
		bad("instanceRequirements.arch", "%q: the image is %s; leave arch out to use the image's", r.Arch, p.Image.Arch)
	}
	if p.Runner.Version != "" && p.Runner.SHA256[p.Image.Arch] == "" && (p.Image.Arch == "x64" || p.Image.Arch == "arm64") {
		bad("runner.sha256", "no checksum for %s, the image's arch", p.Image.Arch)
	}
	if p.Disk.SizeGiB < 8 || p.Disk.SizeGiB > 16384 {
		bad("disk.sizeGiB", "%d: want 8 to 16384", p.Disk.SizeGiB)
	}
	if p.MetadataHopLimit != 1 && p.MetadataHopLimit != 2 {
		bad("metadataHopLimit", "%d: want 1, or 2 for containers that need the metadata service", p.MetadataHopLimit)
	}
	for _, sg := range p.SecurityGroups {
		if !sgRe.MatchString(sg) {
			bad("securityGroups", "%q: want sg- and hex digits", sg)
		}
	}
	for _, r := range p.AllowedRepositories {
		if !coveredBy(r, gh.Repositories) {
			bad("allowedRepositories", "%q is not among github.repositories, so its workflows could not use the pool", r)
		}
	}
	// Everything the pool document says is checked by the code that reads it, label-routed jobs
	// included (labels, scope, runner group), and reported under the pool's own fields.
	placeholders := Placeholders
	placeholders.GitHubURL = gh.ServerURL
	placeholders.StackLabel = stackLabel
	placeholders.Installations = gh.Installations
	if len(gh.Repositories) > 0 { // none is reported once, at github.repositories
		placeholders.Repositories = gh.Repositories
	}
	if _, err := p.Document(placeholders).Parsed(); err != nil {
		errs = append(errs, documentProblems(err, i, p.Name)...)
	}
	return errs
}

// stackWide are the pool document's fields that come from the stack's own settings, not the
// pool's: their problems are reported once, at the config's field (github.serverUrl, app.label),
// rather than once per pool.
var stackWide = []string{"githubUrl:", "jobs.stackLabel:"}

// documentProblems names the problems pooldoc finds in pool i's document ("pool "x": market:
// ...") by the config's field ("pools[i].market: ..."); a problem of another shape keeps its
// text under pools[i].*.
func documentProblems(err error, i int, name string) []error {
	var out []error
	prefix := fmt.Sprintf("pool %q: ", name)
	for _, e := range leaves(err) {
		rest, ok := strings.CutPrefix(e.Error(), prefix)
		switch {
		case !ok:
			out = append(out, fmt.Errorf("pools[%d].*: %w", i, e))
		case slices.ContainsFunc(stackWide, func(f string) bool { return strings.HasPrefix(rest, f) }):
			// reported once, by Validate, at the config's own field
		default:
			out = append(out, fmt.Errorf("pools[%d].%s", i, rest))
		}
	}
	return out
}

// leaves returns the errors joined in err (errors.Join, nested), or err itself.
func leaves(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, leaves(e)...)
	}
	return out
}

// coveredBy reports whether repository pattern r is within one of the allowed patterns.
func coveredBy(r string, allowed []string) bool {
	owner, _, _ := strings.Cut(r, "/")
	for _, a := range allowed {
		if a == r || a == owner+"/*" {
			return true
		}
	}
	return false
}

// StackCap is the stack's bound on live instances as every pool document carries it (nil: none).
func (c *Config) StackCap() *pooldoc.StackCap {
	if c.MaxInstances == 0 {
		return nil
	}
	cap := &pooldoc.StackCap{MaxInstances: c.MaxInstances}
	for _, p := range c.Pools {
		cap.Pools = append(cap.Pools, p.Name)
	}
	return cap
}
