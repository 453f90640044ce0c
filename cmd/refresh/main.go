// Command refresh is Hangar's refresh (package refresh). As a Lambda's bootstrap
// (provided.al2023) it serves one of the stack's two functions: the events function
// (HANGAR_REFRESH_SOURCE=eventbridge), which EventBridge alone invokes, handles the schedule, EC2
// spot interruption warnings and state-change notifications; the refresh function, which the
// workflows may invoke, handles manual refreshes ({"action":"refresh","dryRun":true}), which get
// the report back, and refuses every event, so that no workflow can forge one. From a shell it
// runs once:
//
//	refresh --once [--dry-run] [--stack hangar]
//
// The stack comes from --stack or HANGAR_STACK. The action's mode: refresh, which invokes the
// deployed function from a workflow, is `hangar refresh` (cmd/hangar): this binary links nothing
// of GitHub or the Actions toolkit (internal/checks/layout keeps it so).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hangar-ci/hangar/internal/wire/awscfg"
	"github.com/hangar-ci/hangar/internal/wire/refreshwire"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/refresh"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "refresh")
	if os.Getenv("AWS_LAMBDA_RUNTIME_API") != "" {
		// Wired once, before the first invoke; each invoke reads the stack's documents anew.
		h, err := newInvoker(context.Background(), os.Getenv("HANGAR_STACK"), os.Getenv(pooldoc.RefreshSourceEnv), log, os.Stdout)
		if err != nil {
			log.Error("init the function", "error", err)
			os.Exit(1)
		}
		lambda.Start(h)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cli(ctx, os.Args[1:], log); err != nil {
		fmt.Fprintln(os.Stderr, "refresh:", err)
		stop()
		os.Exit(1)
	}
}

// invoker handles invocations for one stack. It takes the raw payload (lambda.Handler), so that
// even a payload that is not JSON gets refresh's own message.
type invoker struct {
	wire  *refreshwire.Wiring
	log   *slog.Logger
	stack string
	// events: EventBridge invokes this function (the events function), with the schedule and
	// EC2's events; otherwise the workflows may, with manual refreshes only.
	events bool
}

// newInvoker checks the stack's name and who invokes the function (source: the value of
// HANGAR_REFRESH_SOURCE) and builds the clients; it makes no request. Metrics go to metrics (in
// Lambda, stdout, which Lambda sends to CloudWatch).
func newInvoker(ctx context.Context, stack, source string, log *slog.Logger, metrics io.Writer) (*invoker, error) {
	if stack == "" {
		return nil, errors.New("HANGAR_STACK is not set: the environment names the stack to refresh")
	}
	if source != "" && source != pooldoc.RefreshSourceEventBridge {
		return nil, fmt.Errorf("%s: %q: want %s (the events function) or nothing (the function the workflows invoke)",
			pooldoc.RefreshSourceEnv, source, pooldoc.RefreshSourceEventBridge)
	}
	cfg, err := awscfg.Load(ctx)
	if err != nil {
		return nil, err
	}
	return &invoker{wire: refreshwire.New(cfg, stack, refreshwire.Options{Log: log, Metrics: metrics}), log: log,
		stack: stack, events: source == pooldoc.RefreshSourceEventBridge}, nil
}

// Invoke handles one invocation.
func (h *invoker) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	out, err := h.handle(ctx, payload)
	if err != nil {
		h.log.Error("refresh", "error", err)
		return nil, err
	}
	return json.Marshal(out)
}

func cli(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("refresh", flag.ContinueOnError)
	stack := fs.String("stack", os.Getenv("HANGAR_STACK"), "the Hangar stack (HANGAR_STACK)")
	once := fs.Bool("once", false, "refresh once and exit (the only mode outside Lambda)")
	dry := fs.Bool("dry-run", false, "report what would be done; change nothing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !*once {
		return errors.New("outside Lambda, run with --once")
	}
	h, err := newInvoker(ctx, *stack, "", log, os.Stderr)
	if err != nil {
		return err
	}
	out, err := h.handle(ctx, json.RawMessage(`{"action":"refresh","dryRun":`+strconv.FormatBool(*dry)+`}`))
	if err != nil {
		return err
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	fmt.Println(string(b))
	return nil
}

// event is every shape refresh is invoked with.
type event struct {
	Source     string          `json:"source"`
	DetailType string          `json:"detail-type"`
	Detail     json.RawMessage `json:"detail"`
	refresh.Request
}

// ec2States are the states EC2's state-change notifications carry.
var ec2States = []string{"pending", "running", "stopping", "stopped", "shutting-down", "terminated"}

// Event kinds.
const (
	scheduled  = "Scheduled Event"
	spotNotice = "EC2 Spot Instance Interruption Warning"
	stateEvent = "EC2 Instance State-change Notification"
)

// handle decodes an invocation and does what it asks. A malformed event changes nothing.
func (h *invoker) handle(ctx context.Context, raw json.RawMessage) (any, error) {
	var ev event
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, fmt.Errorf("malformed event: %w: want a scheduled event, an EC2 spot interruption warning or state-change notification, or {\"action\":\"refresh\"}", err)
	}
	var detail struct {
		InstanceID string `json:"instance-id"`
		State      string `json:"state"`
	}
	kind := ev.DetailType
	switch {
	case ev.Action == refresh.ActionRefresh:
		if err := ev.Validate(); err != nil {
			return nil, fmt.Errorf("malformed manual refresh: %w", err)
		}
		kind = "manual"
	case ev.Source == "aws.events" && kind == scheduled:
	case ev.Source == "aws.ec2" && (kind == spotNotice || kind == stateEvent):
		if err := json.Unmarshal(ev.Detail, &detail); err != nil || detail.InstanceID == "" {
			return nil, fmt.Errorf("malformed %s: detail.instance-id is missing", kind)
		}
		if err := names.ValidateInstanceID(detail.InstanceID); err != nil {
			return nil, fmt.Errorf("malformed %s: %w", kind, err)
		}
		if kind == stateEvent && !slices.Contains(ec2States, detail.State) {
			return nil, fmt.Errorf("malformed %s: detail.state %q: want one of %s", kind, detail.State, strings.Join(ec2States, ", "))
		}
	default:
		return nil, fmt.Errorf("unrecognised event (source %q, detail-type %q, action %q): want a scheduled event, an EC2 spot interruption warning or state-change notification, or {\"action\":\"refresh\"}",
			ev.Source, ev.DetailType, ev.Action)
	}
	if err := h.accepts(kind); err != nil {
		return nil, err
	}

	stack, deps, err := h.wire.Load(ctx)
	if err != nil {
		return nil, err
	}
	switch kind {
	case spotNotice:
		return refresh.Interrupted(ctx, deps, detail.InstanceID)
	case stateEvent:
		return refresh.StateChanged(ctx, deps, detail.InstanceID, detail.State)
	}
	docs := stack.Pools
	if len(ev.Pools) > 0 {
		for _, p := range ev.Pools {
			if stack.Pool(p) == nil {
				return nil, fmt.Errorf("pools: %q is not a pool of stack %s (its pools: %s)", p, stack.Name, poolNames(stack.Pools))
			}
		}
		docs = slices.DeleteFunc(slices.Clone(docs), func(d *pooldoc.Document) bool { return !slices.Contains(ev.Pools, d.Name) })
	}
	rep, err := refresh.Run(ctx, refresh.Config{Stack: stack.Name, Pools: docs, DryRun: ev.DryRun}, deps)
	if err != nil {
		return nil, err
	}
	if stack.Problems != nil {
		rep.Errors = append([]string{stack.Problems.Error()}, rep.Errors...)
	}
	return rep, nil
}

// accepts refuses what this function's invokers may not ask: the schedule and EC2's events come
// only from EventBridge, through the events function, which no workflow may invoke; a workflow
// could otherwise mark any instance terminated with a forged event. The events function takes no
// manual refresh: the workflows cannot reach it, and nothing else should.
func (h *invoker) accepts(kind string) error {
	switch {
	case kind == "manual" && h.events:
		return fmt.Errorf("refused a manual refresh: this is the events function, invoked by EventBridge alone; invoke %s instead",
			pooldoc.RefreshFunction(h.stack))
	case kind != "manual" && !h.events:
		return fmt.Errorf("refused %s: the schedule and EC2's events reach refresh only from EventBridge, through the function %s; this function, which the workflows may invoke, takes only {\"action\":\"refresh\"}",
			describe(kind), pooldoc.RefreshEventsFunction(h.stack))
	}
	return nil
}

// describe names an event kind in a sentence.
func describe(kind string) string {
	if kind == scheduled {
		return "a scheduled event"
	}
	return "an " + kind
}

func poolNames(docs []*pooldoc.Document) string {
	names := make([]string, len(docs))
	for i, d := range docs {
		names[i] = d.Name
	}
	return strings.Join(names, ", ")
}
