package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/hangar-ci/hangar/internal/testkit/awsproxy"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
)

func init() { register("provision", benchProvision) }

// Targets of provision and release.
const (
	warmTotal1Target     = 350 * time.Millisecond
	warmTotal10Target    = 330 * time.Millisecond
	warmOverhead1Target  = 150 * time.Millisecond
	warmOverhead10Target = 300 * time.Millisecond
	coldOverheadTarget   = 300 * time.Millisecond
	releaseBeyondTarget  = 200 * time.Millisecond
	claimableTarget      = 100 * time.Millisecond
	benchProvisionRun    = 900000
)

// warmRequestsTarget and releaseRequestsTarget are the AWS request budgets for n instances. A
// warm provision spends three on each instance: its claim, the read of its doorbell's tag (a
// secret goes only to a doorbell tagged with the claimed instance: docs/security.md) and its
// hand-over.
func warmRequestsTarget(n int) float64    { return float64(4 + 3*n) }
func releaseRequestsTarget(n int) float64 { return float64(3 + 2*n) }

// stepRunner runs the provision and release binaries as the action does, against the local
// world, with their AWS traffic through counting proxies.
type stepRunner struct {
	e                    *localenv.Env
	provisionBin, relBin string
	moto, ddb            *awsproxy.Proxy
	dir                  string
}

// run runs a step binary as the action does (localenv.StepEnv), with its AWS traffic through the
// counting proxies, and returns how long it took, the requests it made and what it left.
func (s *stepRunner) run(ctx context.Context, bin, run string, n int) (time.Duration, map[string]int, localenv.StepResult, error) {
	env := append(s.e.StepEnv(run, n, s.dir), "AWS_ENDPOINT_URL="+s.moto.URL(), "AWS_ENDPOINT_URL_DYNAMODB="+s.ddb.URL())
	s.moto.Take()
	s.ddb.Take()
	start := time.Now()
	res, err := localenv.RunStep(ctx, bin, env, s.dir)
	took := time.Since(start)
	ops := s.moto.Take()
	for k, v := range s.ddb.Take() {
		ops[k] += v
	}
	if err != nil {
		return took, ops, res, fmt.Errorf("run %s: %w", run, err)
	}
	return took, ops, res, nil
}

// instanceIDs reads a provision step's instance-ids output.
func instanceIDs(res localenv.StepResult) ([]string, error) {
	var ids []string
	if err := json.Unmarshal([]byte(res.Outputs["instance-ids"]), &ids); err != nil {
		return nil, fmt.Errorf("instance-ids output %q: %w", res.Outputs["instance-ids"], err)
	}
	return ids, nil
}

// agentSpan is how long the agents themselves took for run: for each instance, from the write
// that handed it the run to its REGISTERED signal; the longest.
func (s *stepRunner) agentSpan(ctx context.Context, ids []string, run string) (time.Duration, error) {
	items, err := s.e.Store.GetMany(ctx, ids)
	if err != nil {
		return 0, err
	}
	var span time.Duration
	for _, id := range ids {
		it, ok := items[id]
		if !ok || it.SignalRun != run {
			return 0, fmt.Errorf("%s: no REGISTERED signal for run %s", id, run)
		}
		handed, err := assignedAt(s.e.Sim.AgentLog(id), run)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", id, err)
		}
		span = max(span, it.SignalAt.Sub(handed))
	}
	return span, nil
}

// assignedAt reads from an agent's log when the run was written to its item: the moment the
// agent noticed it, less how long that took.
func assignedAt(log, run string) (time.Time, error) {
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var at time.Time
	for sc.Scan() {
		var line struct {
			Time        time.Time `json:"time"`
			Msg         string    `json:"msg"`
			Run         string    `json:"run"`
			DetectionMs int64     `json:"detectionMs"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == detectionLogMsg && line.Run == run {
			at = line.Time.Add(-time.Duration(line.DetectionMs) * time.Millisecond)
		}
	}
	if at.IsZero() {
		return at, fmt.Errorf("the agent never noticed run %s", run)
	}
	return at, nil
}

// deregSpan is how long the agents took to deregister after release wrote idle: the longest.
func (s *stepRunner) deregSpan(ctx context.Context, ids []string, run string) (time.Duration, error) {
	items, err := s.e.Store.GetMany(ctx, ids)
	if err != nil {
		return 0, err
	}
	var span time.Duration
	for _, id := range ids {
		it := items[id]
		if it == nil || !it.SignalFor(state.SignalDeregistered, run, 0) {
			return 0, fmt.Errorf("%s: no DEREGISTERED for run %s", id, run)
		}
		// The item's last control-plane write is release's running → idle (updatedAt).
		span = max(span, it.SignalAt.Sub(it.UpdatedAt))
	}
	return span, nil
}

// newStepRunner starts a local world of its own (baked runner, real agents) with the step
// binaries built and the counting proxies up; close ends them all.
func newStepRunner(ctx context.Context) (*stepRunner, error) {
	e, err := localenv.Start(ctx, localenv.Options{Baked: true})
	if err != nil {
		return nil, err
	}
	s := &stepRunner{e: e}
	if err := s.setUp(); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *stepRunner) setUp() (err error) {
	if s.provisionBin, err = testbuild.Build("github.com/hangar-ci/hangar/cmd/provision"); err != nil {
		return err
	}
	if s.relBin, err = testbuild.Build("github.com/hangar-ci/hangar/cmd/release"); err != nil {
		return err
	}
	if s.moto, err = awsproxy.New(os.Getenv("AWS_ENDPOINT_URL"), 1); err != nil {
		return err
	}
	if s.ddb, err = awsproxy.New(os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), 1); err != nil {
		return err
	}
	s.dir, err = os.MkdirTemp("", "hangar-bench-")
	return err
}

func (s *stepRunner) close() {
	for _, p := range []*awsproxy.Proxy{s.moto, s.ddb} {
		if p != nil {
			p.Close()
		}
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
	s.e.Close()
}

func benchProvision(ctx context.Context, cfg benchConfig) ([]Row, error) {
	s, err := newStepRunner(ctx)
	if err != nil {
		return nil, err
	}
	defer s.close()

	// Cold: ten instances created, in one request.
	run := benchProvisionRun
	coldTook, coldOps, coldRes, err := s.run(ctx, s.provisionBin, strconv.Itoa(run), 10)
	if err != nil {
		return nil, err
	}
	coldIDs, err := instanceIDs(coldRes)
	if err != nil {
		return nil, err
	}
	coldSpan, err := s.agentSpan(ctx, coldIDs, strconv.Itoa(run))
	if err != nil {
		return nil, err
	}
	if _, _, _, err := s.run(ctx, s.relBin, strconv.Itoa(run), 0); err != nil {
		return nil, err
	}
	rows := []Row{
		row("cold provision of 10: control-plane overhead, total − the agents' boot and registration", "s", (coldTook - coldSpan).Seconds(),
			coldOverheadTarget.Seconds(), "≤ "+secs(coldOverheadTarget)).vs(seedColdOverhead.Seconds()).note(fmt.Sprintf("total %s", secs(coldTook))),
		row("cold provision of 10: CreateFleet requests", "requests", float64(coldOps["EC2.CreateFleet"]), 1, "1"),
	}

	// Warm: the same instances, reused round after round.
	for _, n := range []int{1, 10} {
		rounds := cfg.rounds
		if n == 10 {
			rounds = max(cfg.rounds/2, 1)
		}
		var totals, overheads, beyond, claimable []time.Duration
		var requests, relRequests int
		byOp, relByOp := map[string]int{}, map[string]int{}
		for range rounds {
			run++
			r := strconv.Itoa(run)
			took, ops, res, err := s.run(ctx, s.provisionBin, r, n)
			if err != nil {
				return nil, err
			}
			ids, err := instanceIDs(res)
			if err != nil {
				return nil, err
			}
			if ops["EC2.CreateFleet"] != 0 {
				return nil, fmt.Errorf("warm provision of %d created instances:\n%s\n%s", n, res.Summary, res.Log)
			}
			span, err := s.agentSpan(ctx, ids, r)
			if err != nil {
				return nil, err
			}
			totals, overheads = append(totals, took), append(overheads, took-span)
			requests += awsproxy.Sum(ops)
			for k, v := range ops {
				byOp[k] += v
			}
			relTook, relOps, _, err := s.run(ctx, s.relBin, r, 0)
			if err != nil {
				return nil, err
			}
			released := time.Now()
			relRequests += awsproxy.Sum(relOps)
			for k, v := range relOps {
				relByOp[k] += v
			}
			dereg, err := s.deregSpan(ctx, ids, r)
			if err != nil {
				return nil, err
			}
			beyond = append(beyond, relTook-dereg)
			if n == 1 {
				took, err := s.claimAgain(ctx, ids[0], released, run)
				if err != nil {
					return nil, err
				}
				claimable = append(claimable, took)
			}
		}
		totalTarget, overheadTarget, seed := warmTotal1Target, warmOverhead1Target, seedWarm1
		if n == 10 {
			totalTarget, overheadTarget, seed = warmTotal10Target, warmOverhead10Target, seedWarm10
		}
		perRun, relPerRun := float64(requests)/float64(rounds), float64(relRequests)/float64(rounds)
		rows = append(rows,
			timed(fmt.Sprintf("warm provision of %d: total wall time of the step binary, real agents", n), totals, totalTarget, false).vs(seed.Seconds()),
			timed(fmt.Sprintf("warm provision of %d: control-plane overhead, total − the agents' registration", n), overheads, overheadTarget, false),
			row(fmt.Sprintf("warm provision of %d: AWS requests", n), "requests", perRun, warmRequestsTarget(n),
				fmt.Sprintf("≤ %.0f (4 + 3N)", warmRequestsTarget(n))).vs(seedWarmRequests(n)).note("mean: "+breakdown(byOp, rounds)),
			timed(fmt.Sprintf("release of %d: wall time beyond the agents' deregistration", n), beyond, releaseBeyondTarget, false),
			row(fmt.Sprintf("release of %d: AWS requests", n), "requests", relPerRun, releaseRequestsTarget(n),
				fmt.Sprintf("≤ %.0f (3 + 2N)", releaseRequestsTarget(n))).note("mean: "+breakdown(relByOp, rounds)),
		)
		if n == 1 {
			rows = append(rows, timed("released instance claimable again: release returns → a claim of it has won", claimable, claimableTarget, false))
		}
	}
	return rows, nil
}

// claimAgain claims the instance id just released, timing from released (release's return) until
// the claim has won: its offer received from the pool queue (peeked, so that the pool's other
// offers stay visible), the conditional claim written, as provision's selector
// does. Then, once its agent has registered for the claim, the release step gives it back.
func (s *stepRunner) claimAgain(ctx context.Context, id string, released time.Time, run int) (time.Duration, error) {
	owner, name, _ := strings.Cut(localenv.Repo, "/")
	tok, _, err := s.e.GitHub.Actions.CreateRegistrationToken(ctx, owner, name)
	if err != nil {
		return 0, err
	}
	r := strconv.Itoa(run) + "0"
	client := sqs.NewFromConfig(s.e.AWS)
	var (
		offer  offers.Message
		handle string
		others []sqstypes.ChangeMessageVisibilityBatchRequestEntry // given back, as the selector gives back offers it does not use
	)
	giveBack := func() error {
		for len(others) > 0 {
			batch := others[:min(10, len(others))]
			others = others[len(batch):]
			out, err := client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &s.e.Doc.QueueURL, Entries: batch})
			if err != nil {
				return fmt.Errorf("give back the offers not claimed: %w", err)
			}
			if len(out.Failed) > 0 {
				return fmt.Errorf("give back the offers not claimed: %d failed: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
			}
		}
		return nil
	}
	for offer.InstanceID != id {
		if time.Since(released) > time.Minute {
			return 0, fmt.Errorf("no offer of %s in the pool a minute after release", id)
		}
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &s.e.Doc.QueueURL, MaxNumberOfMessages: 10, VisibilityTimeout: 5})
		if err != nil {
			return 0, err
		}
		for _, m := range out.Messages {
			if msg, err := offers.ParseMessage(aws.ToString(m.Body), s.e.Pool); err == nil && msg.InstanceID == id && offer.InstanceID == "" {
				offer, handle = msg, aws.ToString(m.ReceiptHandle)
				continue
			}
			others = append(others, sqstypes.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String("m" + strconv.Itoa(len(others)%10)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
		}
	}
	in, err := s.e.Store.Transition(ctx, state.Change{InstanceID: id, Pool: s.e.Pool, From: offer.State(), To: state.Claimed, Version: offer.Version,
		Assign: &state.Assignment{RunID: r, RunAttempt: 1, Repo: localenv.Repo, RunnerURL: s.e.RunnerURL(), RunnerPrefix: s.e.RunnerNames().Prefix(),
			HandOverSum: state.SecretSum(tok.GetToken())},
		Threshold: time.Now().Add(time.Minute), Reason: "claimed by the bench"})
	took := time.Since(released)
	if err != nil {
		return 0, fmt.Errorf("claim %s after its release: %w", id, err)
	}
	if err := s.e.HandOver(ctx, in, tok.GetToken()); err != nil {
		return 0, fmt.Errorf("hand %s its token: %w", id, err)
	}
	if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &s.e.Doc.QueueURL, ReceiptHandle: &handle}); err != nil {
		return 0, fmt.Errorf("delete the offer claimed: %w", err)
	}
	if err := giveBack(); err != nil {
		return 0, err
	}
	if err := s.e.Ring(ctx, in); err != nil {
		return 0, err
	}
	if _, err := s.e.WaitSignal(ctx, id, state.SignalRegistered, r, in.Version); err != nil {
		return 0, err
	}
	if _, _, _, err := s.run(ctx, s.relBin, r, 0); err != nil {
		return 0, err
	}
	return took, nil
}

// breakdown lists the mean requests per run by operation, most first.
func breakdown(ops map[string]int, runs int) string {
	type op struct {
		name string
		n    int
	}
	var all []op
	for k, v := range ops {
		all = append(all, op{k, v})
	}
	slices.SortFunc(all, func(a, b op) int { return cmp.Or(b.n-a.n, strings.Compare(a.name, b.name)) })
	parts := make([]string, len(all))
	for i, o := range all {
		parts[i] = fmt.Sprintf("%s %.1f", o.name, float64(o.n)/float64(runs))
	}
	return strings.Join(parts, ", ")
}
