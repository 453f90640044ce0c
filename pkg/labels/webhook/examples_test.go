package webhook_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/internal/testkit/ghspec"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/labels/webhook"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/platform/metrics"
)

// okDB records every event it is asked to (each is the first of its kind).
type okDB struct {
	awsapi.DynamoDB
	calls atomic.Int64
}

func (d *okDB) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	d.calls.Add(1)
	return &dynamodb.UpdateItemOutput{}, nil
}

// claiming is a stack whose stack label is ubuntu-latest, serving Codertocat's repositories
// through installation 1: it makes some of GitHub's recorded jobs its own, so that they meet its
// trust set.
type claiming struct{}

func (claiming) LoadStack(context.Context) (*pooldoc.Stack, error) {
	return &pooldoc.Stack{Name: "hangar", Table: "t", Account: state.Account{Partition: "aws", Region: "us-east-1", ID: testbed.Account},
		Pools: []*pooldoc.Document{{Name: "linux", AllowedRepositories: []string{"Codertocat/*"},
			Jobs: &pooldoc.Jobs{StackLabel: "ubuntu-latest", Labels: []string{"linux"}, Installations: []int64{1}}}}}, nil
}

// outcome is what the handler must answer a recorded delivery with, for one stack.
type outcome struct {
	status int
	says   string
	passed bool // put on the jobs queue
}

// TestRecordedPayloads: every workflow_job payload GitHub recorded (@octokit/webhooks-examples),
// signed with the webhook secret, is answered as the handler's rules say for it, by a stack
// none of whose jobs they are and by one whose stack label they carry; and every recorded ping
// is answered pong.
func TestRecordedPayloads(t *testing.T) {
	t.Parallel()
	const (
		noInstallation = "names no installation"
		notOurs        = "not the stack's job"
		refused        = "job refused"
	)
	// By the examples' order in the pinned package: the delivery, then the outcome for the
	// package's own stack (pools) and for the claiming stack. The payloads that carry no
	// installation were delivered to a repository's webhook, not an App's: the handler leaves
	// another system's job alone, and refuses one that names the stack.
	tests := []struct {
		action, repo    string
		ours, claimsFor outcome
	}{
		{"in_progress", "octo-org/example-workflow", outcome{202, "not the stack's job or runner", false}, outcome{202, "not the stack's job or runner", false}},
		{"completed", "Codertocat/Hello-World", outcome{202, "not the stack's job or runner", false}, outcome{403, noInstallation, false}},
		{"completed", "Codertocat/Hello-World", outcome{202, "not the stack's job or runner", false}, outcome{403, noInstallation, false}},
		{"in_progress", "Codertocat/Hello-World", outcome{202, "not the stack's job or runner", false}, outcome{202, "in_progress passed on", true}},
		{"in_progress", "wolfy1339/github-events-schemas", outcome{202, "not the stack's job or runner", false}, outcome{403, refused, false}},
		{"queued", "Codertocat/Hello-World", outcome{202, notOurs, false}, outcome{403, refused, false}},
		{"queued", "lineville/elastic-machines-testing", outcome{202, notOurs, false}, outcome{202, notOurs, false}},
		{"waiting", "lineville/elastic-machines-testing", outcome{202, "waiting ignored", false}, outcome{202, "waiting ignored", false}},
	}
	examples := ghspec.Examples(t, "workflow_job")
	require.Len(t, examples, len(tests), "a recorded payload without an expected outcome")
	for i, tc := range tests {
		var p struct {
			Action     string
			Repository struct {
				FullName string `json:"full_name"`
			}
		}
		require.NoError(t, json.Unmarshal(examples[i], &p))
		require.Equal(t, tc.action+" "+tc.repo, p.Action+" "+p.Repository.FullName, "example %d", i)
		for _, stack := range []struct {
			name  string
			pools webhook.Pools
			want  outcome
		}{{"not its jobs", pools{table: "t"}, tc.ours}, {"claiming them", claiming{}, tc.claimsFor}} {
			t.Run(strconv.Itoa(i)+" "+tc.action+" "+tc.repo+", "+stack.name, func(t *testing.T) {
				db, q := &okDB{}, &fake.SQS{}
				h, err := webhook.New(webhook.Config{Stack: "hangar", JobsQueueURL: jobsQueue}, webhook.Deps{
					Secret: func(context.Context, bool) ([][]byte, error) { return [][]byte{[]byte(secret)}, nil },
					Queue:  q, Pools: stack.pools, DynamoDB: db, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
					Metrics: &metrics.Writer{Out: &testbed.Buffer{}}})
				require.NoError(t, err)
				resp := h.Handle(context.Background(), request(examples[i], func(h http.Header) {
					h.Set(webhook.HeaderDelivery, "recorded-"+strconv.Itoa(i))
				}))
				require.Equal(t, stack.want.status, resp.Status, resp.Body)
				require.Contains(t, resp.Body, stack.want.says)
				if stack.want.passed {
					require.Len(t, q.Bodies(jobsQueue), 1, "passed on to the dispatcher")
					require.EqualValues(t, 1, db.calls.Load(), "recorded")
				} else {
					require.Empty(t, q.Bodies(jobsQueue), "nothing queued")
					require.Zero(t, db.calls.Load(), "nothing recorded")
				}
			})
		}
	}

	pings := ghspec.Examples(t, "ping")
	require.NotEmpty(t, pings)
	for i, body := range pings {
		h, err := webhook.New(webhook.Config{Stack: "hangar", JobsQueueURL: jobsQueue}, webhook.Deps{
			Secret: func(context.Context, bool) ([][]byte, error) { return [][]byte{[]byte(secret)}, nil },
			Queue:  &fake.SQS{}, Pools: pools{table: "t"}, DynamoDB: &noDB{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Metrics: &metrics.Writer{Out: &testbed.Buffer{}}})
		require.NoError(t, err)
		resp := h.Handle(context.Background(), request(body, func(h http.Header) {
			h.Set(webhook.HeaderEvent, "ping")
			h.Set(webhook.HeaderDelivery, "ping-"+strconv.Itoa(i))
		}))
		require.Equal(t, http.StatusOK, resp.Status, "ping %d: %s", i, resp.Body)
		require.Contains(t, resp.Body, "pong", "ping %d", i)
	}
}

// onGitHub is the package's stack (pools) with its documents pinning github.com, as a deployed
// stack's do.
type onGitHub struct{ pools }

func (p onGitHub) LoadStack(ctx context.Context) (*pooldoc.Stack, error) {
	s, err := p.pools.LoadStack(ctx)
	for _, d := range s.Pools {
		d.GitHubURL = "https://github.com"
	}
	return s, err
}

// TestShownTextIsPlain: what a job's payload gives the operator's views (its name, its
// workflow's, its page) reaches the jobs queue without control or invisible formatting
// characters, or characters SQS refuses, and the page only when it is on the stack's GitHub
// server.
func TestShownTextIsPlain(t *testing.T) {
	t.Parallel()
	q := &fake.SQS{}
	h, err := webhook.New(webhook.Config{Stack: "hangar", JobsQueueURL: jobsQueue}, webhook.Deps{
		Secret: func(context.Context, bool) ([][]byte, error) { return [][]byte{[]byte(secret)}, nil },
		Queue:  q, Pools: onGitHub{pools{table: "t"}}, DynamoDB: &okDB{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: &metrics.Writer{Out: &testbed.Buffer{}}})
	require.NoError(t, err)
	for i, page := range []string{"https://github.com/octo/app/actions/runs/9/job/5", "https://evil.example/octo/app"} {
		body, err := json.Marshal(map[string]any{"action": "queued", "installation": map[string]any{"id": 11},
			"repository": map[string]any{"id": 1, "full_name": "octo/app", "name": "app"},
			"workflow_job": map[string]any{"id": 5 + i, "run_id": 9, "status": "queued", "labels": []string{"hangar", "linux-x64"},
				"name": "build\u202e\x1b[31m\uffff ok", "workflow_name": strings.Repeat("w", 600), "html_url": page}})
		require.NoError(t, err)
		resp := h.Handle(context.Background(), request(body, nil))
		require.Equal(t, http.StatusAccepted, resp.Status, resp.Body)
	}
	bodies := q.Bodies(jobsQueue)
	require.Len(t, bodies, 2)
	for i, b := range bodies {
		m, err := jobs.Parse(b)
		require.NoError(t, err)
		require.Equal(t, "build[31m ok", m.Job.Name)
		require.Equal(t, strings.Repeat("w", 512)+"…", m.Job.Workflow)
		if i == 0 {
			require.Equal(t, "https://github.com/octo/app/actions/runs/9/job/5", m.Job.URL)
		} else {
			require.Empty(t, m.Job.URL, "a page on another server is no link")
		}
	}
}
