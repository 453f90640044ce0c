package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/pricefake"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/operator"
	"github.com/hangar-ci/hangar/pkg/pool"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
	"github.com/hangar-ci/hangar/pkg/pool/pricing"
)

// world is a stack of two pools whose items are written directly (no agents): every state a
// pool can hold, an instance whose pre-runner script failed and one ended by spot interruption.
type world struct {
	e          *localenv.Env
	arm        *pooldoc.Document
	preRunner  string // claimed; its agent signalled REGISTER_FAILED with the script's output
	spot       string // terminated after SPOT_INTERRUPTED
	idle       []string
	oldSpecArm string
}

var idSeq atomic.Int64

func nextID() string {
	return fmt.Sprintf("i-%017x", time.Now().UnixNano()&0xffffffffff<<16|idSeq.Add(1))
}

func newWorld(t *testing.T) *world {
	t.Helper()
	testbed.Require(t)
	startCtx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e, err := localenv.Start(startCtx, localenv.Options{Stack: testbed.Name(t, "ops"), Baked: true})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	ctx := testbed.Context(t, 2*time.Minute)
	w := &world{e: e}
	w.arm, err = e.AddPool(ctx, "linux-arm")
	require.NoError(t, err)

	deadline := time.Now().Add(time.Hour)
	spec := state.Spec{InstanceType: "c7i.large", UsageClass: state.UsageOnDemand, AZ: "us-east-1a", VCPU: 2, MemoryMiB: 4096, SpecHash: e.Doc.SpecHash,
		Price: 0.0893, PriceSource: state.PriceOnDemand}
	unpriced := spec
	unpriced.Price, unpriced.PriceSource = 0, ""
	create := func(pool string, spec state.Spec, run string) *state.Instance {
		home := e.Doc.Home()
		if pool == w.arm.Name {
			home = w.arm.Home()
		}
		in := &state.Instance{ID: nextID(), Pool: pool, Threshold: deadline, LaunchedAt: time.Now().Add(-time.Hour), Spec: spec, Home: home}
		if run != "" {
			in.Assignment = state.Assignment{RunID: run, RunAttempt: 1, Repo: localenv.Repo}
		}
		require.NoError(t, e.Store.Create(ctx, []*state.Instance{in}))
		got, err := e.Store.Get(ctx, in.ID)
		require.NoError(t, err)
		return got
	}
	move := func(in *state.Instance, to state.State, run, why string) *state.Instance {
		c := state.Change{InstanceID: in.ID, Pool: in.Pool, From: in.State, To: to, Version: in.Version, Threshold: deadline, Reason: why}
		switch {
		case to == state.Claimed:
			c.Assign, c.Reuse = &state.Assignment{RunID: run, RunAttempt: 1, Repo: localenv.Repo}, state.ReuseAny
		case in.RunID != "":
			c.RunID = in.RunID
		}
		// Through TransitionAll with the item as read, as release and refresh write: a move that
		// ends a run leaves its record.
		w := e.Store.TransitionAll(ctx, []state.Change{c}, []state.Instance{*in})[0]
		require.NoError(t, w.Err)
		return w.Item
	}
	signal := func(in *state.Instance, sig state.Signal) {
		a, err := state.NewAgent(e.DynamoDB(), e.Table, e.Store.Account().ARN(in.ID), "test")
		require.NoError(t, err)
		sig.Version = in.Version
		require.NoError(t, a.Signal(ctx, sig))
	}
	dir := &offers.Directory{Loader: &pooldoc.Loader{SSM: ssm.NewFromConfig(e.AWS), Stack: e.Stack}, SQS: sqs.NewFromConfig(e.AWS)}

	// linux-x64: 2 idle and offered, 1 warming, 1 booting for run 701, 1 claimed, 2 running
	// (one of run 702), 1 stopped; one claimed whose pre-runner script failed; one ended by spot.
	for range 2 {
		in := move(create(e.Pool, spec, ""), state.Idle, "", "warm")
		require.NoError(t, dir.Publish(ctx, in))
		w.idle = append(w.idle, in.ID)
	}
	create(e.Pool, spec, "")
	create(e.Pool, spec, "701")
	move(move(create(e.Pool, spec, ""), state.Idle, "", "warm"), state.Claimed, "702", "claimed for run 702")
	for _, sp := range []state.Spec{spec, unpriced} {
		move(move(move(create(e.Pool, sp, ""), state.Idle, "", "warm"), state.Claimed, "702", "claimed for run 702"), state.Running, "", "registered")
	}
	// Run 700 is over: two instances given back, one priced, one not.
	for _, sp := range []state.Spec{spec, unpriced} {
		in := move(move(move(create(e.Pool, sp, ""), state.Idle, "", "warm"), state.Claimed, "700", "claimed for run 700"), state.Running, "", "registered")
		w.idle = append(w.idle, move(in, state.Idle, "", "released by run 700").ID)
	}
	move(move(create(e.Pool, spec, ""), state.Idle, "", "warm"), state.Stopped, "", "stopped for the night")

	failed := move(move(create(e.Pool, spec, ""), state.Idle, "", "warm"), state.Claimed, "703", "claimed for run 703")
	signal(failed, state.Signal{Name: state.SignalRegisterFailed, Run: "703",
		Log: "pre-runner: installing toolchain\npre-runner: curl: (6) could not resolve host\nhangar-agent: pre-runner script failed: exit status 6\n"})
	w.preRunner = failed.ID

	spot := move(move(create(e.Pool, spec, ""), state.Idle, "", "warm"), state.Claimed, "704", "claimed for run 704")
	spot = move(spot, state.Running, "", "registered")
	signal(spot, state.Signal{Name: state.SignalSpotInterrupted})
	move(spot, state.Terminated, "", "spot interruption notice")
	w.spot = spot.ID

	// Run 705 on instances recorded as a launch records them, priced by the Price List
	// stand-in (on-demand) and the emulated spot history (spot), then given back.
	rec := &pool.Pool{Store: e.Store, EC2: e.EC2, Prices: pricing.NewFromConfig(e.AWS)}
	launched, err := rec.Record(ctx, pool.Launched{Pool: e.Doc, At: time.Now().Add(-time.Minute), Reason: "warm", Instances: []fleet.Instance{
		{ID: nextID(), Type: "c7i.large", AZ: "us-east-1a", UsageClass: state.UsageOnDemand, VCPU: 2, MemoryMiB: 4096},
		{ID: nextID(), Type: "c7i.large", AZ: "us-east-1b", UsageClass: state.UsageSpot, VCPU: 2, MemoryMiB: 4096},
	}})
	require.NoError(t, err)
	for _, in := range launched {
		in := move(move(move(in, state.Idle, "", "warm"), state.Claimed, "705", "claimed for run 705"), state.Running, "", "registered")
		w.idle = append(w.idle, move(in, state.Idle, "", "released by run 705").ID)
	}

	// linux-arm: one idle instance launched from an older spec, and a poison message.
	old := spec
	old.SpecHash = "0123456789abcdef"
	in := move(create(w.arm.Name, old, ""), state.Idle, "", "warm")
	w.oldSpecArm = in.ID
	_, err = sqs.NewFromConfig(e.AWS).SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(w.arm.DeadLetterQueueURL), MessageBody: aws.String("not an offer")})
	require.NoError(t, err)
	return w
}

// hangar runs the built command with the world's environment and returns its exit code, stdout
// and stderr.
func (w *world) hangar(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	if env == nil {
		env = append(w.e.Environ(), "HANGAR_STACK="+w.e.Stack)
	}
	return runHangar(t, env, args...)
}

// TestOperatorCommands: status, instance and their bad input on a stack of two pools.
func TestOperatorCommands(t *testing.T) {
	t.Parallel()
	w := newWorld(t)

	t.Run("status as json", func(t *testing.T) {
		code, out, errOut := w.hangar(t, nil, "status", "--output", "json")
		require.Equal(t, 0, code, errOut)
		var status struct {
			Pools []operator.PoolStatus
			Jobs  *operator.JobsStatus
		}
		require.NoError(t, json.Unmarshal([]byte(out), &status))
		require.Nil(t, status.Jobs, "no pool serves label-routed jobs")
		st := status.Pools
		require.Len(t, st, 2)
		byPool := map[string]operator.PoolStatus{}
		for _, p := range st {
			byPool[p.Pool] = p
		}
		x := byPool[w.e.Pool]
		require.Equal(t, 6, x.Idle, "two offered, two given back by run 700, two by run 705")
		require.Equal(t, 1, x.Warming)
		require.Equal(t, 1, x.Booting)
		require.Equal(t, 2, x.Claimed, "one claimed, one whose pre-runner failed")
		require.Equal(t, 2, x.Running)
		require.Equal(t, 1, x.Stopped)
		require.Equal(t, 13, x.Live, "the terminated instance is not live")
		require.Equal(t, 13, x.OnSpec)
		require.Equal(t, 2, x.Offers+x.InFlight, "both idle instances are offered")
		require.Zero(t, x.DeadLetters)
		require.Empty(t, x.Errors)
		arm := byPool["linux-arm"]
		require.Equal(t, 1, arm.Idle)
		require.Equal(t, 1, arm.Live)
		require.Zero(t, arm.OnSpec, "launched from an older spec: not rolled out yet")
		require.Equal(t, 1, arm.DeadLetters)
	})

	t.Run("status of one pool as a table", func(t *testing.T) {
		code, out, errOut := w.hangar(t, nil, "status", "linux-arm")
		require.Equal(t, 0, code, errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 2, out)
		require.Regexp(t, `^POOL\s+IDLE\s+WARMING\s+BOOTING\s+CLAIMED\s+RUNNING\s+STOPPED\s+OFFERS\s+DEAD LETTERS\s+WARM TARGET\s+ON CURRENT SPEC$`, lines[0])
		require.Regexp(t, `^linux-arm\s+1\s+0\s+0\s+0\s+0\s+0\s+\d \(\+\d held\)\s+1\s+\S.*\s+0/1$`, lines[1])
	})

	t.Run("runs as json", func(t *testing.T) {
		code, out, errOut := w.hangar(t, nil, "runs", "--since", "1d", "-o", "json")
		require.Equal(t, 0, code, errOut)
		var runs []operator.RunSummary
		require.NoError(t, json.Unmarshal([]byte(out), &runs))
		byRun := map[string]operator.RunSummary{}
		for _, r := range runs {
			byRun[r.Run] = r
		}
		require.ElementsMatch(t, []string{"700", "701", "702", "703", "704", "705"}, keys(byRun))
		priced := byRun["705"]
		require.Equal(t, 2, priced.Instances)
		require.Zero(t, priced.PriceUnknown)
		var cost705 float64
		for _, h := range priced.Held {
			want := pricefake.Default["us-east-1/c7i.large"]
			if h.UsageClass == state.UsageSpot {
				want = spotPrice(t, w.e, "c7i.large", "us-east-1b")
			}
			require.Equal(t, want, h.Price, "the price served when it was launched (%s)", h.UsageClass)
			cost705 += h.Seconds * want / 3600
		}
		require.InDelta(t, cost705, priced.Cost, 1e-12)
		done := byRun["700"]
		require.Equal(t, "released", done.Outcome)
		require.Equal(t, 2, done.Instances)
		require.Equal(t, 2, done.Reused)
		require.False(t, done.Ended.IsZero())
		require.Equal(t, 1, done.PriceUnknown, "one instance has no price: counted apart, never priced")
		var want float64
		for _, h := range done.Held {
			require.Equal(t, "idle", h.Outcome)
			require.Equal(t, "released by run 700", h.Reason)
			require.Positive(t, h.Seconds)
			if h.PriceKnown {
				require.Equal(t, 0.0893, h.Price)
				want += h.Seconds * 0.0893 / 3600
			}
		}
		require.InDelta(t, want, done.Cost, 1e-9, "cost is instance-seconds × the recorded price")
		require.Equal(t, "1 terminated (spot interruption notice)", byRun["704"].Outcome)
		require.Equal(t, "running", byRun["702"].Outcome)
		require.Equal(t, 3, byRun["702"].Instances)
		require.Equal(t, 1, byRun["701"].Created, "booting for its run: created, not reused")
		require.Equal(t, localenv.Repo, byRun["703"].Repo)

		code, out, errOut = w.hangar(t, nil, "runs", "--limit", "2")
		require.Equal(t, 0, code, errOut)
		require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 3, "a header and two runs:\n%s", out)
	})

	t.Run("cost by repository, pool, run and day", func(t *testing.T) {
		code, out, errOut := w.hangar(t, nil, "runs", "--since", "1d", "-o", "json")
		require.Equal(t, 0, code, errOut)
		var runs []operator.RunSummary
		require.NoError(t, json.Unmarshal([]byte(out), &runs))
		var costs []operator.CostRow
		code, out, errOut = w.hangar(t, nil, "cost", "--by", "repository", "--since", "1d", "-o", "json")
		require.Equal(t, 0, code, errOut)
		require.NoError(t, json.Unmarshal([]byte(out), &costs))
		require.Len(t, costs, 1)
		require.Equal(t, localenv.Repo, costs[0].Key)
		require.Equal(t, 6, costs[0].Runs)
		require.Equal(t, 10, costs[0].Instances)
		require.Positive(t, costs[0].UnknownHours)
		// Runs that last are counted up to the moment each command read them: the ended run's
		// cost is the same in both, the rest only grows.
		var ended float64
		for _, r := range runs {
			if r.Run == "700" || r.Run == "704" || r.Run == "705" {
				ended += r.Cost
			}
		}
		require.GreaterOrEqual(t, costs[0].Cost, ended)

		for _, by := range []string{"pool", "run", "day"} {
			code, out, errOut := w.hangar(t, nil, "cost", "--by", by, "-o", "json")
			require.Equal(t, 0, code, errOut)
			var rows []operator.CostRow
			require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
			require.NotEmpty(t, rows, by)
			if by == "pool" {
				require.Equal(t, w.e.Pool, rows[0].Key, "the pool whose instances cost most")
				require.Positive(t, rows[0].PoolCost, "the pool's instances, idle time included")
				require.Greater(t, rows[0].PoolHours, rows[0].Hours, "the pool's instances live longer than runs hold them")
			}
		}
		code, out, errOut = w.hangar(t, nil, "cost", "--by", "pool")
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "POOL COST")
		require.Contains(t, out, "total held by runs since ")
	})

	t.Run("instance whose pre-runner script failed", func(t *testing.T) {
		code, out, errOut := w.hangar(t, nil, "instance", w.preRunner)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "state:                claimed")
		require.Contains(t, out, "signal:               REGISTER_FAILED for run 703")
		require.Contains(t, out, "log tail (with the REGISTER_FAILED signal):\n  pre-runner: installing toolchain\n  pre-runner: curl: (6) could not resolve host\n  hangar-agent: pre-runner script failed: exit status 6\n")
		require.Contains(t, out, "run:                  703 (attempt 1) of "+localenv.Repo)

		code, out, errOut = w.hangar(t, nil, "instance", w.preRunner, "-o", "json")
		require.Equal(t, 0, code, errOut)
		var r operator.InstanceReport
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		require.Equal(t, w.preRunner, r.ID)
		require.Equal(t, "REGISTER_FAILED", r.Signal)
		require.Contains(t, r.LogTail, "exit status 6")
		require.True(t, r.OnSpec)
	})

	t.Run("instance ended by spot interruption", func(t *testing.T) {
		code, out, errOut := w.hangar(t, nil, "instance", w.spot, "--output=json")
		require.Equal(t, 0, code, errOut)
		var r operator.InstanceReport
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		require.Equal(t, "terminated", r.State)
		require.Equal(t, "spot interruption notice (its agent signalled SPOT_INTERRUPTED)", r.Ended)
		require.Equal(t, "704", r.LastRun)
		require.NotEmpty(t, r.Events)
		require.Equal(t, "launched", r.Events[0].What)
		require.Contains(t, r.Events[len(r.Events)-1].What, "became terminated: spot interruption notice")
	})

	// Input is refused before anything reaches AWS: cases without credentials would fail on them.
	t.Run("bad input exits 2 naming the input", func(t *testing.T) {
		noCreds := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true",
			"AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent"}
		for _, tc := range []struct {
			name string
			env  []string
			args []string
			want string
		}{
			{"unknown stack", nil, []string{"status", "--stack", w.e.Stack + "-gone"}, `--stack: stack "` + w.e.Stack + `-gone": no such stack: no pool documents under /hangar/` + w.e.Stack + `-gone/pools/`},
			{"malformed stack", nil, []string{"status", "--stack", "Bad Stack"}, "--stack: "},
			{"unknown pool", nil, []string{"status", "gpu"}, `pool "gpu": no such pool in stack ` + w.e.Stack + ": want one of "},
			{"unknown instance", nil, []string{"instance", "i-0fffffffffffffff0"}, "instance i-0fffffffffffffff0: not in stack " + w.e.Stack + "'s table"},
			{"malformed instance", noCreds, []string{"instance", "web-1"}, `instance id "web-1" is malformed: want i- followed by`},
			{"no instance", nil, []string{"instance"}, "hangar instance takes one instance id (i-0123456789abcdef0): got 0 arguments"},
			{"malformed since", nil, []string{"runs", "--since", "a month"}, `--since "a month": want a duration like 30d, 12h or 90m, or a date like 2026-11-01`},
			{"unknown grouping", noCreds, []string{"cost", "--by", "team"}, `--by "team": want repository, pool, run or day`},
			{"malformed repository", nil, []string{"cost", "--repo", "app"}, `--repo "app": want owner/name`},
			{"unknown output", nil, []string{"status", "--output", "yaml"}, `--output "yaml": want table or json`},
			{"unknown flag", nil, []string{"status", "--since", "30d"}, "unknown flag: --since"},
			{"unknown command", nil, []string{"costs"}, `unknown command "costs"`},
			{"missing credentials", noCreds, []string{"status", "--stack", w.e.Stack}, "no AWS credentials: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code, out, errOut := w.hangar(t, tc.env, tc.args...)
				require.Equal(t, 2, code, "stdout %s\nstderr %s", out, errOut)
				require.Contains(t, errOut, tc.want)
				require.Empty(t, out)
			})
		}
	})
}

// TestHelpAndCompletion: every command has --help; completion scripts are generated.
func TestHelpAndCompletion(t *testing.T) {
	t.Parallel()
	w := &world{e: &localenv.Env{}}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	code, out, _ := w.hangar(t, env, "--help")
	require.Equal(t, 0, code)
	for _, c := range []string{"status", "runs", "instance", "cost", "refresh", "completion"} {
		require.Regexp(t, `(?m)^\s+`+c+`\s`, out)
	}
	for _, c := range [][]string{{"status", "--help"}, {"runs", "--help"}, {"instance", "--help"}, {"cost", "--help"}, {"help", "refresh"}} {
		code, out, _ := w.hangar(t, env, c...)
		require.Equal(t, 0, code, c)
		require.Contains(t, out, "--stack string", c)
		require.Contains(t, out, "--output string", c)
	}
	code, out, _ = w.hangar(t, env, "completion", "bash")
	require.Equal(t, 0, code)
	require.Contains(t, out, "__start_hangar")
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// spotPrice is the emulated EC2's latest spot price of typ in az.
func spotPrice(t *testing.T, e *localenv.Env, typ, az string) float64 {
	t.Helper()
	out, err := e.EC2.DescribeSpotPriceHistory(testbed.Context(t, 30*time.Second), &ec2.DescribeSpotPriceHistoryInput{
		InstanceTypes: []ec2types.InstanceType{ec2types.InstanceType(typ)}, AvailabilityZone: aws.String(az), ProductDescriptions: []string{"Linux/UNIX"}})
	require.NoError(t, err)
	require.NotEmpty(t, out.SpotPriceHistory)
	p, err := strconv.ParseFloat(aws.ToString(out.SpotPriceHistory[0].SpotPrice), 64)
	require.NoError(t, err)
	return p
}
