package badinput

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/awsproxy"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// itemCase is an item of a run, written into the state table in a shape no part of Hangar writes
// (by hand, a bug, or a holder of the control-plane role), read back through pkg/contract/state and by the
// release step of its run.
type itemCase struct {
	name string
	run  string
	// spoil changes a well-formed running item of the run.
	spoil func(it map[string]ddbtypes.AttributeValue)
	// read: pkg/contract/state refuses to read the item, with these words; nil when it reads it.
	read []string
	// release is the release step's exit code and what its log says.
	releaseExit int
	release     []string
	// unclear, when set, is how the refusal falls short of naming the attribute and what it
	// accepts (a reported product gap; the case asserts what the message does say).
	unclear string
}

func s(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
func n(v int64) ddbtypes.AttributeValue {
	return &ddbtypes.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// itemCases are the item-shape cases read through pkg/contract/state and the release step.
func itemCases() []itemCase {
	notAnItem := "decode item: not a Hangar instance item"
	return []itemCase{
		{name: "unknown state", run: "4301", spoil: func(it map[string]ddbtypes.AttributeValue) { it["state"] = s("exploded") },
			read: []string{notAnItem, `state "exploded"`}, release: []string{"some items of the run are malformed and left to refresh", fakeID("4301")},
			unclear: "names the state but not the states accepted (state.ParseState's message would)"},
		{name: "state not a string", run: "4302", spoil: func(it map[string]ddbtypes.AttributeValue) { it["state"] = n(3) },
			read: []string{notAnItem, `state "3"`}, release: []string{"some items of the run are malformed and left to refresh", fakeID("4302")},
			unclear: "names the state but not the states accepted"},
		{name: "no instance id", run: "4303", spoil: func(it map[string]ddbtypes.AttributeValue) { delete(it, "instanceId") },
			read: []string{notAnItem, `instanceId ""`}, release: []string{"some items of the run are malformed and left to refresh", fakeID("4303")}},
		{name: "time not Unix milliseconds", run: "4304", spoil: func(it map[string]ddbtypes.AttributeValue) { it["launchedAt"] = s("yesterday") },
			read: []string{`cannot unmarshal "yesterday" into time.Time`}, release: []string{"some items of the run are malformed and left to refresh", fakeID("4304")},
			unclear: "does not name the attribute (launchedAt), and names RFC 3339 as the form wanted where the schema stores Unix milliseconds (N)"},
		{name: "no version", run: "4305", spoil: func(it map[string]ddbtypes.AttributeValue) { delete(it, "version") },
			releaseExit: 0, release: []string{"running → idle of " + fakeID("4305") + ": version 0: want the version last read (1 or more)", "::warning::"},
			unclear: "pkg/contract/state reads the item as version 0; release refuses it before any write, and refresh can never retire it once expired (retire: version 0 refused on every pass)"},
	}
}

// fakeID returns a made-up instance id for a case's run (no such instance in EC2).
func fakeID(run string) string { return fmt.Sprintf("i-0bad1e0%010s", run) }

// baseItem is a well-formed running item of run for a made-up instance.
func (w *world) baseItem(run string) map[string]ddbtypes.AttributeValue {
	id := fakeID(run)
	now := time.Now()
	return map[string]ddbtypes.AttributeValue{
		"instanceArn": s(w.Store.Account().ARN(id)), "instanceId": s(id), "pool": s(w.Pool), "state": s(string(state.Running)),
		"version": n(3), "threshold": n(now.Add(time.Hour).UnixMilli()),
		"poolStateShard": s(state.PoolStateShard(w.Pool, state.Running, id)), "runId": s(run), "runAttempt": n(1),
		"repo": s("octo/app"), "runnerUrl": s(w.RunnerURL()), "runnerPrefix": s(w.RunnerNames().Prefix()),
		"instanceType": s("c7i.large"), "usageClass": s(state.UsageOnDemand), "az": s("us-east-1a"), "vcpu": n(2), "memoryMiB": n(4096),
		"specHash": s("local"), "launchedAt": n(now.UnixMilli()), "updatedAt": n(now.UnixMilli()),
		"idleSecs": n(w.Doc.Home().IdleSecs), "offerTo": s(w.Doc.QueueURL),
	}
}

// putItem writes a raw item into the state table (not through the counting proxies).
func (w *world) putItem(t *testing.T, item map[string]ddbtypes.AttributeValue) {
	t.Helper()
	_, err := w.DynamoDB().PutItem(w.ctx, &dynamodb.PutItemInput{TableName: aws.String(w.Table), Item: item})
	require.NoError(t, err)
}

// dropItem removes a case's item when the case ends.
func (w *world) dropItem(t *testing.T, id string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = w.DynamoDB().DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(w.Table),
			Key: map[string]ddbtypes.AttributeValue{"instanceArn": s(w.Store.Account().ARN(id))}})
	})
}

// rawItem reads an item as it is in the table.
func (w *world) rawItem(t *testing.T, id string) map[string]ddbtypes.AttributeValue {
	t.Helper()
	out, err := w.DynamoDB().GetItem(w.ctx, &dynamodb.GetItemInput{TableName: aws.String(w.Table),
		Key: map[string]ddbtypes.AttributeValue{"instanceArn": s(w.Store.Account().ARN(id))}, ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	return out.Item
}

// itemRun writes a case's item and reads it through pkg/contract/state and the release step of its run:
// refused (or, for release, given up on with a warning), no mutating call, the item as it was,
// the pool untouched.
func (w *world) itemRun(c itemCase) func(t *testing.T) {
	return func(t *testing.T) {
		item := w.baseItem(c.run)
		c.spoil(item)
		w.dropItem(t, fakeID(c.run))
		w.putItem(t, item)
		_, getErr := w.Store.Get(w.ctx, fakeID(c.run))
		_, byRunErr := w.Store.ByRun(w.ctx, c.run)
		if c.read == nil {
			require.NoError(t, getErr)
			require.NoError(t, byRunErr)
		} else {
			for _, err := range []error{getErr, byRunErr} {
				require.Error(t, err, "pkg/contract/state read an item no part of Hangar writes")
				for _, x := range c.read {
					require.Contains(t, err.Error(), x)
				}
			}
		}
		if c.releaseExit == 0 {
			w.releaseGivesUp(t, c)
		} else {
			w.stepRun(stepCase{name: c.name, step: releaseStep, set: env("GITHUB_RUN_ID", c.run), exit: c.releaseExit, want: c.release})(t)
		}
		require.Equal(t, item, w.rawItem(t, fakeID(c.run)), "the item was changed")
		if c.unclear != "" {
			t.Logf("unclear message (reported): %s", c.unclear)
		}
	}
}

// releaseGivesUp runs the release step of a case whose item release reads but cannot move: it
// succeeds with a warning naming the attribute, writes nothing to the table, EC2 or the queues,
// and leaves the item alone.
func (w *world) releaseGivesUp(t *testing.T, c itemCase) {
	t.Helper()
	w.counts()
	res, err := w.runRelease(c.run)
	ops := w.counts()
	t.Logf("exit %d, AWS %v\n%s", exitCode(err), ops, res.Log)
	require.NoError(t, err)
	for _, x := range c.release {
		require.Contains(t, res.Log, x)
	}
	mutating := awsproxy.MutatingOps(ops)
	require.Empty(t, mutating, "mutating AWS calls for an unusable item (release seals nothing)")
	w.untouched(t)
}

// refreshItemCase is an item in a pool's idle index that no part of Hangar writes: a dry-run
// refresh reports it, naming the item and the attribute, and changes nothing.
func (w *world) refreshItemRun(t *testing.T) {
	id := fakeID("4306")
	item := w.baseItem("4306")
	item["state"] = s("exploded")
	delete(item, "runId")
	item["poolStateShard"] = s(state.PoolStateShard(w.Pool, state.Idle, id))
	w.dropItem(t, id)
	w.putItem(t, item)

	w.counts()
	res, err := w.fn.Invoke(w.ctx, []byte(`{"action":"refresh","dryRun":true,"pools":["`+w.Pool+`"]}`))
	require.NoError(t, err)
	ops := w.counts()
	require.False(t, res.Error, "%s", res.Payload)
	var rep struct {
		Errors []string `json:"errors"`
		Pools  []struct {
			Idle int `json:"idle"`
		} `json:"pools"`
	}
	require.NoError(t, json.Unmarshal(res.Payload, &rep), "%s", res.Payload)
	t.Logf("AWS %v\nreport %s", ops, res.Payload)
	require.NotEmpty(t, rep.Errors)
	require.Contains(t, rep.Errors[0], id)
	require.Contains(t, rep.Errors[0], `state "exploded"`)
	require.Empty(t, awsproxy.MutatingOps(ops), "mutating AWS calls in a dry run")
	require.Equal(t, item, w.rawItem(t, id), "the item was changed")
	w.untouched(t)
	require.Len(t, rep.Pools, 1)
	idle, err := w.Store.InPoolState(w.ctx, w.Pool, state.Idle)
	require.ErrorIs(t, err, state.ErrBadItem, "the store names the malformed item")
	require.Len(t, idle, rep.Pools[0].Idle, "one malformed item hides none of the pool's other idle instances from refresh")
	require.GreaterOrEqual(t, len(idle), len(w.idle))
}
