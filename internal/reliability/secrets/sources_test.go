package secrets

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// jsonText renders v for scanning.
func jsonText(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// stepSources are what the steps left: their output, step summaries and outputs.
func (w *world) stepSources(t *testing.T) []source {
	var out []source
	for _, s := range w.steps {
		out = append(out, source{s.name + ": output", s.res.Log}, source{s.name + ": step summary", s.res.Summary},
			source{s.name + ": outputs", jsonText(t, s.res.Outputs)})
	}
	return out
}

// agentSources are each agent's log and DynamoDB requests (its signals and their log tails).
func (w *world) agentSources(t *testing.T) []source {
	var out []source
	for _, id := range slices.Sorted(maps.Keys(w.allIDs)) {
		log := w.Sim.AgentLog(id)
		require.NotEmpty(t, log, "agent log of %s", id)
		out = append(out, source{"agent log of " + id, log})
		var reqs strings.Builder
		for _, r := range w.Sim.Requests(id) {
			fmt.Fprintf(&reqs, "%s %s\n", r.Op, r.Body)
		}
		require.NotZero(t, reqs.Len(), "DynamoDB requests of %s's agent", id)
		out = append(out, source{"DynamoDB requests of the agent of " + id, reqs.String()})
	}
	return out
}

// lambdaSources are the refresh function's output, its metric lines among them.
func (w *world) lambdaSources(t *testing.T) []source {
	logs := w.fn.Logs()
	var metrics []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"CloudWatchMetrics"`) {
			metrics = append(metrics, line)
		}
	}
	require.NotEmpty(t, metrics, "the refresh function wrote EMF metric lines:\n%s", logs)
	return []source{{"refresh function output", logs}, {"refresh metric lines", strings.Join(metrics, "\n")}}
}

// ec2Sources are the stack's instances as EC2 describes them (tags included), their volumes' and
// their own tags, their user data, and the pool's launch template, every version.
func (w *world) ec2Sources(t *testing.T) []source {
	out, err := w.EC2.DescribeInstances(w.ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:" + fleet.TagStack), Values: []string{w.Stack}}}})
	require.NoError(t, err)
	var srcs []source
	resources := []string{}
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			id := aws.ToString(in.InstanceId)
			w.allIDs[id] = true
			resources = append(resources, id)
			for _, bd := range in.BlockDeviceMappings {
				if bd.Ebs != nil {
					resources = append(resources, aws.ToString(bd.Ebs.VolumeId))
				}
			}
			srcs = append(srcs, source{"EC2 description of " + id, jsonText(t, in)})
			ud, err := w.EC2.DescribeInstanceAttribute(w.ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: in.InstanceId,
				Attribute: ec2types.InstanceAttributeNameUserData})
			require.NoError(t, err)
			srcs = append(srcs, source{"user data of " + id, decoded(ud.UserData)})
		}
	}
	require.NotEmpty(t, resources, "the stack's instances")
	tags, err := w.EC2.DescribeTags(w.ctx, &ec2.DescribeTagsInput{Filters: []ec2types.Filter{{Name: aws.String("resource-id"), Values: resources}}})
	require.NoError(t, err)
	require.NotEmpty(t, tags.Tags)
	srcs = append(srcs, source{"EC2 tags", jsonText(t, tags.Tags)})
	lt, err := w.EC2.DescribeLaunchTemplateVersions(w.ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateId: aws.String(w.Doc.LaunchTemplate.ID)})
	require.NoError(t, err)
	for _, v := range lt.LaunchTemplateVersions {
		text := jsonText(t, v)
		if v.LaunchTemplateData != nil && v.LaunchTemplateData.UserData != nil {
			b, _ := base64.StdEncoding.DecodeString(aws.ToString(v.LaunchTemplateData.UserData))
			text += "\n" + string(b)
		}
		srcs = append(srcs, source{fmt.Sprintf("launch template %s version %d", w.Doc.LaunchTemplate.ID, aws.ToInt64(v.VersionNumber)), text})
	}
	return srcs
}

// decoded returns an instance's user data, decoded from base64 (and as it was, for good measure).
func decoded(v *ec2types.AttributeValue) string {
	if v == nil || v.Value == nil {
		return ""
	}
	b, _ := base64.StdEncoding.DecodeString(aws.ToString(v.Value))
	return aws.ToString(v.Value) + "\n" + string(b)
}

// queueSources are every message of the stack's queues (pool queues, dead-letter queues, and any
// other queue named for the stack). The messages are received without being deleted, then made
// visible again at once (visibility 0), as a peek: none is consumed.
func (w *world) queueSources(t *testing.T) []source {
	client := sqs.NewFromConfig(w.AWS)
	list, err := client.ListQueues(w.ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(w.Stack)})
	require.NoError(t, err)
	require.Contains(t, list.QueueUrls, w.Doc.QueueURL)
	var srcs []source
	for _, q := range list.QueueUrls {
		msgs := w.peek(t, client, q)
		var text strings.Builder
		for _, m := range msgs {
			fmt.Fprintf(&text, "%s\n%s\n", aws.ToString(m.Body), jsonText(t, m.MessageAttributes))
		}
		if q == w.Doc.QueueURL {
			require.NotEmpty(t, msgs, "the pool's queue holds the released instances' offers")
		}
		srcs = append(srcs, source{"messages of queue " + q, text.String()})
	}
	return srcs
}

// peek receives every visible message of queue q, then makes them all visible again.
func (w *world) peek(t *testing.T, client *sqs.Client, q string) []sqstypes.Message {
	t.Helper()
	names := []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
		sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}
	attrs, err := client.GetQueueAttributes(w.ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(q), AttributeNames: names})
	require.NoError(t, err)
	visible, _ := strconv.Atoi(attrs.Attributes[string(names[0])])
	if hidden := attrs.Attributes[string(names[1])]; hidden != "0" {
		t.Logf("queue %s: %s messages in flight, not read", q, hidden)
	}
	seen := map[string]sqstypes.Message{}
	for tries := 0; len(seen) < visible && tries < visible+5; tries++ {
		res, err := client.ReceiveMessage(w.ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q), MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, VisibilityTimeout: 60, MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll}})
		require.NoError(t, err)
		for _, m := range res.Messages {
			seen[aws.ToString(m.MessageId)] = m
		}
	}
	require.Len(t, seen, visible, "every message of %s received", q)
	msgs := slices.Collect(maps.Values(seen))
	for chunk := range slices.Chunk(msgs, 10) {
		entries := make([]sqstypes.ChangeMessageVisibilityBatchRequestEntry, len(chunk))
		for i, m := range chunk {
			entries[i] = sqstypes.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}
		}
		out, err := client.ChangeMessageVisibilityBatch(w.ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(q), Entries: entries})
		require.NoError(t, err)
		require.Empty(t, out.Failed, "messages of %s made visible again", q)
	}
	return msgs
}

// tableSources are the stack's state table, every item, and every write the steps made to it;
// none may hold a runner secret, in the clear (the scanner) or under an attribute named for one:
// secrets ride the doorbells.
func (w *world) tableSources(t *testing.T) []source {
	var writes strings.Builder
	checked := 0
	for _, e := range w.writes {
		op := e.Target[strings.LastIndex(e.Target, ".")+1:]
		switch op {
		case "GetItem", "BatchGetItem", "Query", "Scan", "DescribeTable":
			continue
		}
		fmt.Fprintf(&writes, "%s %s\n", op, e.Req)
		require.Empty(t, secretsSet(t, e.Req), "a write by a step sets a secret attribute: %s", e.Req)
		checked++
	}
	require.Positive(t, checked, "the steps wrote to the table: the check above saw the writes")
	t.Logf("%d writes by the steps to the state table, none with a secret attribute", checked)
	return []source{w.tableItems(t, "at the end"), {"the steps' writes to the state table", writes.String()}}
}

// tableItems scans the state table: every item, as text, and no attribute named for a secret.
func (w *world) tableItems(t *testing.T, when string) source {
	t.Helper()
	var items []map[string]ddbtypes.AttributeValue
	p := dynamodb.NewScanPaginator(w.DynamoDB(), &dynamodb.ScanInput{TableName: aws.String(w.Table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(w.ctx)
		require.NoError(t, err)
		items = append(items, page.Items...)
	}
	require.NotEmpty(t, items)
	var table strings.Builder
	for _, it := range items {
		var plain map[string]any
		require.NoError(t, attributevalue.UnmarshalMap(it, &plain))
		table.WriteString(jsonText(t, plain) + "\n")
		arn, _ := plain["instanceArn"].(string)
		for _, attr := range secretAttrs {
			_, ok := plain[attr]
			require.False(t, ok, "no item carries %s (%s %s)", attr, arn, when)
		}
	}
	return source{fmt.Sprintf("state table %s %s (%d items)", w.Table, when, len(items)), table.String()}
}

// secretAttrs are attributes named for runner secrets: no item may carry one.
var secretAttrs = []string{"regToken", "regTokenExpiresAt", "jitConfig", "removeToken"}

// secretsSet returns the secret attributes a write request sets: an item put with one, or an
// update that assigns one.
func secretsSet(t *testing.T, body []byte) []string {
	t.Helper()
	var req any
	require.NoError(t, json.Unmarshal(body, &req), "%s", body)
	var set []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if item, ok := v["Item"].(map[string]any); ok {
				for _, attr := range secretAttrs {
					if _, ok := item[attr]; ok {
						set = append(set, attr)
					}
				}
			}
			if expr, ok := v["UpdateExpression"].(string); ok {
				names, _ := v["ExpressionAttributeNames"].(map[string]any)
				for ph, name := range names {
					if slices.Contains(secretAttrs, fmt.Sprint(name)) && regexp.MustCompile(regexp.QuoteMeta(ph)+`\s*=`).MatchString(expr) {
						set = append(set, fmt.Sprint(name))
					}
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(req)
	return set
}

// snapshotSources are what the cycle saw while the runs held their runners: the files on the
// instances (run directories, registrations) and the state table.
func (w *world) snapshotSources(*testing.T) []source { return w.snapshots }

// snapshot keeps the instances' files and the state table as they are now.
func (w *world) snapshot(t *testing.T, when string) {
	t.Helper()
	w.snapshots = append(w.snapshots, w.disk(t, when)...)
	w.snapshots = append(w.snapshots, w.tableItems(t, when))
}

// otherSources are the stack's pool documents, the GitHub stand-in's runners, and the jobs'
// output (their environment: the runner's).
func (w *world) otherSources(t *testing.T) []source {
	params, err := ssm.NewFromConfig(w.AWS).GetParametersByPath(w.ctx, &ssm.GetParametersByPathInput{Path: aws.String(pooldoc.ParameterPath(w.Stack))})
	require.NoError(t, err)
	require.NotEmpty(t, params.Parameters)
	require.Len(t, w.jobs, 4)
	return []source{{"pool documents", jsonText(t, params.Parameters)}, {"GitHub runners", jsonText(t, w.GH.Runners(""))},
		{"jobs' output", strings.Join(w.jobs, "\n")}}
}

// diskSources are every regular file the simulated instances hold (runner installs, run
// directories, the agents' state), up to 4 MiB each (the runner install's binary, larger, is
// root's and read-only: nothing can have written a token into it).
func (w *world) diskSources(t *testing.T) []source { return w.disk(t, "at the end") }

// disk reads every regular file the simulated instances hold now.
func (w *world) disk(t *testing.T, when string) []source {
	var srcs []source
	for _, id := range slices.Sorted(maps.Keys(w.allIDs)) {
		root := filepath.Dir(w.Sim.RunsDir(id)) // the instance's directory in the simulator
		var paths []string
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, walkErr error) error {
			if walkErr == nil && d.Type().IsRegular() { // what vanished meanwhile holds nothing
				paths = append(paths, path)
			}
			return nil
		})
		require.NoError(t, err)
		files := 0
		for _, path := range paths {
			info, err := os.Stat(path)
			if err != nil || info.Size() > 4<<20 {
				continue
			}
			b, err := os.ReadFile(path)
			if err != nil {
				continue
			}
			files++
			srcs = append(srcs, source{"file " + path + " " + when, string(b)})
		}
		require.Positive(t, files, "files of %s under %s", id, root)
	}
	return srcs
}
