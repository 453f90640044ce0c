// Command agent is Hangar's instance agent (package agent), started by systemd from the launch
// template's user data:
//
//	agent --stack prod --pool linux-x64
//
// It reads its identity from instance metadata (IMDSv2), its pool document from SSM
// (/hangar/<stack>/pools/<pool>, or a local file with --pool-document) and runs until its
// instance is terminated or it gets SIGTERM. Every flag has an environment variable
// (HANGAR_<FLAG>, upper case, dashes as underscores); a flag given wins over its variable, and a
// malformed variable stops the agent at start with an error naming it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/hangar-ci/hangar/internal/wire/awscfg"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/instance/agent"
	"github.com/hangar-ci/hangar/pkg/instance/host"
	"github.com/hangar-ci/hangar/pkg/instance/runas"
)

var version = "dev"

// options are the command line.
type options struct {
	stack, pool, poolDocument string
	runnerDir, runsDir, runAs string
	helper                    string
	stateDir, tmpDirs         string
	cgroupRoot, walkSkip      string
	sharedKernel              bool
	poll, heartbeat, grace    time.Duration
	safety, doorbellWait      time.Duration
	bootWait, spot            time.Duration
	shutdown                  string
	logFormat                 string
}

func main() {
	if code, ok := runas.Main(os.Args[1:]); ok {
		// The helper's commands, hidden: the agent runs itself so where hangar-runas is missing.
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "hangar-agent:", err)
		os.Exit(2)
	}
	log := newLogger(opts.logFormat).With("component", "agent")
	err = run(ctx, opts, log)
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		log.Info("agent stopped")
	case errors.Is(err, agent.ErrTerminated):
		log.Info("agent done: instance terminating")
	default:
		log.Error("agent failed", "error", err)
		os.Exit(1)
	}
}

// envName is the environment variable of a flag: HANGAR_<FLAG>, upper case, dashes as underscores.
func envName(flag string) string {
	return "HANGAR_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// parse reads the flags from args and their defaults from the HANGAR_* environment. A malformed
// variable is an error, never silently replaced by the default: an agent would otherwise run
// with settings nobody asked for.
func parse(args []string) (options, error) {
	var o options
	var envErrs []error
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	str := func(p *string, name, def, usage string) {
		if v, ok := os.LookupEnv(envName(name)); ok {
			def = v
		}
		fs.StringVar(p, name, def, usage)
	}
	// An empty duration variable counts as unset (systemd's Environment=HANGAR_BOOT_WAIT=).
	dur := func(p *time.Duration, name string, def time.Duration, usage string) {
		if v := os.Getenv(envName(name)); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				envErrs = append(envErrs, fmt.Errorf("%s: %q: want a duration such as 1s or 2m", envName(name), v))
			} else {
				def = d
			}
		}
		fs.DurationVar(p, name, def, usage)
	}
	str(&o.stack, "stack", "", "the Hangar stack name (pool documents live under /hangar/<stack>/pools/)")
	str(&o.pool, "pool", "", "this instance's pool")
	str(&o.poolDocument, "pool-document", "", "read the pool document from this file instead of SSM")
	str(&o.runnerDir, "runner-dir", agent.DefaultRunnerDir, "where the GitHub runner is (or is installed), root-owned; each run gets a copy")
	str(&o.stateDir, "state-dir", agent.DefaultStateDir, "what the agent keeps across restarts (init markers)")
	str(&o.runsDir, "runs-dir", "", "the root-owned parent of each run's directories (default <state-dir>/runs)")
	str(&o.runAs, "run-as", "", "the unprivileged user the runner runs as (default: the pool's runner.user); never root or the agent's own user")
	str(&o.helper, "helper", "", "the helper that starts the runner's scripts as the runner user (default: "+host.HelperName+" beside the agent, else the agent itself)")
	str(&o.cgroupRoot, "cgroup-root", "", "the cgroup v2 directory delegated to the agent, below which every run gets a cgroup of its own (default: the agent's own cgroup)")
	boolean := func(p *bool, name string, usage string) {
		def := false
		if v := os.Getenv(envName(name)); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				envErrs = append(envErrs, fmt.Errorf("%s: %q: want true or false", envName(name), v))
			}
			def = b
		}
		fs.BoolVar(p, name, def, usage)
	}
	boolean(&o.sharedKernel, "shared-kernel", "other machines' runs share this kernel (a test bed): leave kernel-wide settings as they are, so the kernel itself does not refuse user namespaces to the runner user")
	str(&o.walkSkip, "walk-skip", "", "comma-separated trees the walks of the file systems leave alone besides the kernel's and the agent's own (a test bed's own tools, which no instance has); never on an instance")
	str(&o.tmpDirs, "tmp-dirs", strings.Join(host.DefaultTmpDirs, ","), "comma-separated shared temporary directories cleared of the runner user's files after every run")
	dur(&o.poll, "poll-interval", agent.DefaultPollInterval, "how often the item is read when the instance has no working doorbell (one DynamoDB request each)")
	dur(&o.safety, "safety-interval", agent.DefaultSafetyInterval, "how often the item is read while the doorbell works (catches a lost ring)")
	dur(&o.doorbellWait, "doorbell-wait", agent.DefaultDoorbellWait, "each long poll of the doorbell queue (whole seconds, at most 20s; one SQS request each)")
	dur(&o.heartbeat, "heartbeat-interval", agent.DefaultHeartbeatInterval, "how often the heartbeat is written")
	dur(&o.grace, "terminate-grace", agent.DefaultTerminateGrace, "how far past its deadline the instance terminates itself")
	dur(&o.bootWait, "boot-wait", 0, "how long to wait for the item at boot (default: the pool's created timeout)")
	dur(&o.spot, "spot-interval", agent.DefaultSpotInterval, "how often to look for a spot interruption notice")
	str(&o.shutdown, "shutdown-command", strings.Join(agent.DefaultShutdownCommand, " "), "powers the machine off: how the agent ends its instance (the launch template makes a shutdown a termination)")
	str(&o.logFormat, "log-format", "json", "json or text")
	if err := errors.Join(envErrs...); err != nil {
		return o, err
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.poolDocument == "" && (o.stack == "" || o.pool == "") {
		return o, errors.New("--stack and --pool (HANGAR_STACK, HANGAR_POOL), or --pool-document (HANGAR_POOL_DOCUMENT), are required")
	}
	if o.logFormat != "json" && o.logFormat != "text" {
		return o, fmt.Errorf("--log-format (HANGAR_LOG_FORMAT) %q: want json or text", o.logFormat)
	}
	if strings.TrimSpace(o.shutdown) == "" {
		return o, errors.New("--shutdown-command (HANGAR_SHUTDOWN_COMMAND) is empty")
	}
	return o, nil
}

func newLogger(format string) *slog.Logger {
	if format == "text" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, nil))
}

func run(ctx context.Context, o options, log *slog.Logger) error {
	awsCfg, err := awscfg.Load(ctx)
	if err != nil {
		return err
	}
	md := imds.NewFromConfig(awsCfg)
	id, err := agent.ReadIdentity(ctx, md)
	if err != nil {
		return err
	}
	if awsCfg.Region == "" {
		awsCfg.Region = id.Region
	}
	pool, err := loadPool(ctx, awsCfg, o)
	if err != nil {
		return err
	}
	runAs := o.runAs
	if runAs == "" {
		runAs = pool.Runner.User
	}
	tmpDirs := splitList(o.tmpDirs)
	metadata := os.Getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT") // the SDK's own variable: the endpoint md uses
	store, err := state.NewAgent(dynamodb.NewFromConfig(awsCfg), pool.Table, id.ARN(), version)
	if err != nil {
		return err
	}
	// The agent runs these as root too: only programs root alone can change (host.ResolveProgram).
	shutdown := strings.Fields(o.shutdown)
	if len(shutdown) > 0 {
		if shutdown[0], err = host.ResolveProgram(shutdown[0]); err != nil {
			return fmt.Errorf("--shutdown-command %q: %w", o.shutdown, err)
		}
	}
	if _, err := host.ResolveProgram(agent.ScriptShell); err != nil {
		return fmt.Errorf("the shell of the pre-runner scripts: %w", err)
	}
	cfg := agent.Config{
		Identity: id, Pool: pool, RunnerDir: o.runnerDir, StateDir: o.stateDir, RunsDir: o.runsDir,
		PollInterval: o.poll, SafetyInterval: o.safety, DoorbellWait: o.doorbellWait,
		HeartbeatInterval: o.heartbeat, TerminateGrace: o.grace, BootWait: o.bootWait,
		SpotInterval: o.spot, ShutdownCommand: shutdown, Version: version,
	}
	cfg.ApplyDefaults() // settles the agent's own directories, which the host keeps out of the runs' reach
	log = log.With("instance", id.InstanceID, "pool", pool.Name)
	h, err := host.New(host.Config{RunAs: runAs, Runner: pool.Runner, OwnDirs: []string{cfg.RunnerDir, cfg.RunsDir, cfg.StateDir},
		TmpDirs: tmpDirs, Helper: o.helper, MetadataEndpoint: metadata, CgroupRoot: o.cgroupRoot,
		SharedKernel: o.sharedKernel, WalkSkip: splitList(o.walkSkip)}, log)
	if err != nil {
		return err
	}
	a, err := agent.New(cfg, store, onHost{h}, ec2.NewFromConfig(awsCfg), md, log)
	if err != nil {
		return err
	}
	queues := sqs.NewFromConfig(awsCfg)
	a.Doorbell, a.Returns = queues, queues
	log.Info("agent starting", "version", version, "type", id.InstanceType, "az", id.AZ)
	return a.Run(ctx)
}

func loadPool(ctx context.Context, awsCfg aws.Config, o options) (*pooldoc.Document, error) {
	if o.poolDocument != "" {
		b, err := os.ReadFile(o.poolDocument)
		if err != nil {
			return nil, fmt.Errorf("read pool document: %w", err)
		}
		return pooldoc.Parse(b)
	}
	return pooldoc.Load(ctx, ssm.NewFromConfig(awsCfg), o.stack, o.pool)
}

// onHost is package host's Host as the agent reaches it (agent.Host): the agent declares what it
// needs of the machine, and knows nothing of package host.
type onHost struct{ *host.Host }

// OpenRun returns the host's run as an agent.Run.
func (h onHost) OpenRun(dir string) (agent.Run, error) {
	r, err := h.Host.OpenRun(dir)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// splitList splits a comma-separated flag into its non-empty, trimmed items.
func splitList(v string) []string {
	out := []string{}
	for _, d := range strings.Split(v, ",") {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, d)
		}
	}
	return out
}
