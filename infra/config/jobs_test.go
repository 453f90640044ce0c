package config

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// jobsExample is testdata/hangar.jobs.yaml read as a map: two pools with jobs (repository and
// organization scope), one without.
func jobsExample(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../testdata/hangar.jobs.yaml")
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(b, &m))
	return m
}

func parseMap(t *testing.T, m map[string]any) (*Config, error) {
	t.Helper()
	b, err := yaml.Marshal(m)
	require.NoError(t, err)
	return Parse(b)
}

func poolN(m map[string]any, i int) map[string]any  { return m["pools"].([]any)[i].(map[string]any) }
func jobsOf(m map[string]any, i int) map[string]any { return poolN(m, i)["jobs"].(map[string]any) }
func appOf(m map[string]any) map[string]any         { return m["app"].(map[string]any) }

// TestJobsParses: the jobs config parses, and every pool document with jobs carries them, the
// app's label and the returns queue; the pool without jobs carries neither.
func TestJobsParses(t *testing.T) {
	t.Parallel()
	cfg, err := Load("../testdata/hangar.jobs.yaml")
	require.NoError(t, err)
	require.True(t, cfg.ServesJobs())
	require.Equal(t, &App{Label: "hangar", BatchSize: 20, BatchWindow: pooldoc.Duration(time.Second)}, cfg.App)
	d := Placeholders
	d.StackLabel, d.ReturnsQueueURL = "hangar", "https://sqs.us-east-1.amazonaws.com/123456789012/hangar-jobs-returns"
	x64, err := cfg.Pools[0].Document(d).Parsed()
	require.NoError(t, err)
	require.Equal(t, &pooldoc.Jobs{StackLabel: "hangar", Labels: []string{"linux-x64"}, Scope: pooldoc.JobScopeRepository,
		QueueURL: d.JobsQueueURL, DeadLetterQueueURL: d.JobsDeadLetterURL}, x64.Jobs)
	require.Equal(t, d.ReturnsQueueURL, x64.ReturnsQueueURL)
	arm, err := cfg.Pools[1].Document(d).Parsed()
	require.NoError(t, err)
	require.Equal(t, &pooldoc.Jobs{StackLabel: "hangar", Labels: []string{"linux", "ARM64"}, Scope: pooldoc.JobScopeOrganization,
		QueueURL: d.JobsQueueURL, DeadLetterQueueURL: d.JobsDeadLetterURL}, arm.Jobs)
	steps, err := cfg.Pools[2].Document(d).Parsed()
	require.NoError(t, err)
	require.Nil(t, steps.Jobs)
	require.Empty(t, steps.ReturnsQueueURL, "only pools with jobs name the returns queue")
}

// TestJobsDefaults: without app, label-routed jobs take the stack's name as their label, batches
// of 10 without a window; a pool's jobs are repository-scoped unless said otherwise.
func TestJobsDefaults(t *testing.T) {
	t.Parallel()
	m := jobsExample(t)
	delete(m, "app")
	cfg, err := parseMap(t, m)
	require.NoError(t, err)
	require.Equal(t, &App{Label: "hangar-jobs", BatchSize: DefaultBatchSize}, cfg.App)
	require.Equal(t, pooldoc.JobScopeRepository, cfg.Pools[0].Jobs.Scope)
	require.Equal(t, &Jobs{Labels: []string{"linux", "ARM64"}, Scope: pooldoc.JobScopeOrganization}, cfg.Pools[1].Jobs)
	require.Nil(t, cfg.Pools[2].Jobs)

	ex, err := Load("../hangar.example.yaml")
	require.NoError(t, err)
	require.Nil(t, ex.App, "no pool with jobs: no app")
	require.False(t, ex.ServesJobs())
}

func TestAPIURL(t *testing.T) {
	t.Parallel()
	for server, want := range map[string]string{
		"https://github.com":       "https://api.github.com",
		"":                         "https://api.github.com",
		"https://ghe.example.com":  "https://ghe.example.com/api/v3",
		"https://ghe.example.com/": "https://ghe.example.com/api/v3",
	} {
		require.Equal(t, want, GitHub{ServerURL: server}.APIURL(), server)
	}
}

// TestJobsConfigErrors: every problem of label-routed jobs is reported, naming its field and
// the bad value.
func TestJobsConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mut  func(m map[string]any)
		want string
	}{
		{"bad label", func(m map[string]any) { jobsOf(m, 0)["labels"] = []any{"linux x64"} },
			`pools[0].jobs.labels: "linux x64": want 1 to 64 of letters, digits`},
		{"self-hosted label", func(m map[string]any) { jobsOf(m, 0)["labels"] = []any{"Self-Hosted"} },
			`pools[0].jobs.labels: "Self-Hosted": every self-hosted runner carries it`},
		{"the stack label in a pool's labels", func(m map[string]any) { jobsOf(m, 1)["labels"] = []any{"linux", "HANGAR"} },
			`pools[1].jobs.labels: "HANGAR" is the stack label`},
		{"no labels", func(m map[string]any) { jobsOf(m, 0)["labels"] = []any{} }, "pools[0].jobs.labels: 0 labels: want 1 to 10"},
		{"too many labels", func(m map[string]any) {
			jobsOf(m, 0)["labels"] = []any{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "a10", "a11"}
		}, "pools[0].jobs.labels: 11 labels: want 1 to 10"},
		{"a label twice", func(m map[string]any) { jobsOf(m, 1)["labels"] = []any{"arm64", "ARM64"} },
			`pools[1].jobs.labels: "ARM64" twice (labels compare without regard to case)`},
		{"duplicate label sets", func(m map[string]any) {
			jobs := map[string]any{"labels": []any{"LINUX-X64"}}
			poolN(m, 2)["jobs"] = jobs
		}, "pools[2].jobs.labels: [LINUX-X64]: the same labels as pools[0] (linux-x64), ignoring case and order"},
		{"duplicate label sets, another order", func(m map[string]any) { jobsOf(m, 0)["labels"] = []any{"arm64", "Linux"} },
			"pools[1].jobs.labels: [linux ARM64]: the same labels as pools[0] (linux-x64)"},
		{"a runner group for label-routed jobs", func(m map[string]any) { jobsOf(m, 1)["runnerGroup"] = "ci" },
			`unknown field "runnerGroup"`},
		{"scope", func(m map[string]any) { jobsOf(m, 0)["scope"] = "org" }, `pools[0].jobs.scope: "org": want repository or organization`},
		{"stack label in a pool's jobs", func(m map[string]any) { jobsOf(m, 0)["stackLabel"] = "x" }, `unknown field "stackLabel"`},
		{"batch size 50 with window 0", func(m map[string]any) { appOf(m)["batchSize"] = 50; appOf(m)["batchWindow"] = "0s" },
			"app.batchWindow: 0s with batchSize 50: SQS hands Lambda more than 10 messages at once only with a batching window of at least 1s"},
		{"batch size 50, default window", func(m map[string]any) { appOf(m)["batchSize"] = 50; delete(appOf(m), "batchWindow") },
			"app.batchWindow: 0s with batchSize 50"},
		{"batch size", func(m map[string]any) { appOf(m)["batchSize"] = 101 }, "app.batchSize: 101: want 1 to 100"},
		{"negative batch size", func(m map[string]any) { appOf(m)["batchSize"] = -1 }, "app.batchSize: -1: want 1 to 100"},
		{"batch window", func(m map[string]any) { appOf(m)["batchWindow"] = "6s" }, "app.batchWindow: 6s: want 0s to 5s"},
		{"batch window in parts of seconds", func(m map[string]any) { appOf(m)["batchWindow"] = "1500ms" }, "app.batchWindow: 1.5s: want whole seconds"},
		{"app without jobs pools", func(m map[string]any) {
			delete(poolN(m, 0), "jobs")
			delete(poolN(m, 1), "jobs")
		}, "app: no pool has jobs"},
		{"bad app secret ARN", func(m map[string]any) { appOf(m)["appSecretArn"] = "arn:aws:s3:::hangar-app" },
			`app.appSecretArn: "arn:aws:s3:::hangar-app": want a Secrets Manager secret's ARN`},
		{"webhook secret by name", func(m map[string]any) { appOf(m)["webhookSecretArn"] = "hangar-webhook" },
			`app.webhookSecretArn: "hangar-webhook": want a Secrets Manager secret's ARN`},
		{"bad app label", func(m map[string]any) { appOf(m)["label"] = "self-hosted" }, `app.label: "self-hosted": every self-hosted runner carries it`},
		{"the default label", func(m map[string]any) {
			m["stack"] = "4242"
			delete(appOf(m), "label")
		}, `app.label: "4242": all digits could name another run; want at least one letter or '.', '_', '-' (the stack's name, app.label's default: set app.label)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := jobsExample(t)
			tc.mut(m)
			_, err := parseMap(t, m)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestJobsErrorsOnce: a stack-wide setting's problem is reported once, at its own field, not
// again for every pool document that carries it; and the rest of the file is still checked.
func TestJobsErrorsOnce(t *testing.T) {
	t.Parallel()
	m := jobsExample(t)
	appOf(m)["label"] = "self-hosted"
	appOf(m)["batchSize"] = 500
	poolN(m, 2)["market"] = "reserved"
	_, err := parseMap(t, m)
	require.Error(t, err)
	msg := err.Error()
	require.Equal(t, 1, strings.Count(msg, `"self-hosted":`), msg)
	require.NotContains(t, msg, "stackLabel")
	require.Contains(t, msg, "app.batchSize: 500")
	require.Contains(t, msg, `pools[2].market: "reserved"`, "the pool documents' problems under the pools' fields")
}

// TestValidateWithoutDefaults: a config built in code must have its defaults applied before
// Validate, which changes nothing.
func TestValidateWithoutDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := Load("../testdata/hangar.jobs.yaml")
	require.NoError(t, err)
	cfg.App = nil
	require.ErrorContains(t, cfg.Validate(), "app: missing while pools have jobs (ApplyDefaults fills it in)")
	require.Nil(t, cfg.App, "Validate changes nothing")
	cfg.ApplyDefaults()
	require.NoError(t, cfg.Validate())
	require.Equal(t, "hangar-jobs", cfg.App.Label)
}

// TestExampleJobsBlocks: the example shows label-routed jobs in comments; uncommented, they make
// a valid config that serves them.
func TestExampleJobsBlocks(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../hangar.example.yaml")
	require.NoError(t, err)
	var lines []string
	uncommented := 0
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "# app:"), strings.HasPrefix(l, "#   "):
			l, uncommented = strings.TrimPrefix(l, "# "), uncommented+1
		case strings.HasPrefix(l, "    # jobs:"), strings.HasPrefix(l, "    #   "):
			l, uncommented = "    "+strings.TrimPrefix(l, "    # "), uncommented+1
		}
		lines = append(lines, l)
	}
	require.Equal(t, 9, uncommented, "the app block and the pool's jobs")
	cfg, err := Parse([]byte(strings.Join(lines, "\n")))
	require.NoError(t, err)
	require.True(t, cfg.ServesJobs())
	require.Equal(t, &App{Label: "hangar", BatchSize: 10}, cfg.App)
	require.Equal(t, &Jobs{Labels: []string{"linux-x64"}, Scope: pooldoc.JobScopeRepository}, cfg.Pools[0].Jobs)
}

// TestMaxInstances: a pool's maxInstances and the stack's reach every pool document (the stack's
// with every pool's name, to count over); a bound below zero, or one the warm pool could never
// fit under, is refused by name.
func TestMaxInstances(t *testing.T) {
	t.Parallel()
	m := jobsExample(t)
	m["maxInstances"] = 50
	poolN(m, 0)["maxInstances"] = 40
	cfg, err := parseMap(t, m)
	require.NoError(t, err)
	d := Placeholders
	d.StackCap = cfg.StackCap()
	x64, err := cfg.Pools[0].Document(d).Parsed()
	require.NoError(t, err)
	require.Equal(t, 40, x64.MaxInstances)
	require.Equal(t, &pooldoc.StackCap{MaxInstances: 50, Pools: []string{"linux-x64", "linux-arm64", "steps-only"}}, x64.StackCap)
	arm, err := cfg.Pools[1].Document(d).Parsed()
	require.NoError(t, err)
	require.Zero(t, arm.MaxInstances, "no bound of its own")
	require.Equal(t, x64.StackCap, arm.StackCap)

	for _, tc := range []struct {
		name   string
		change func(m map[string]any)
		want   string
	}{
		{"negative pool bound", func(m map[string]any) { poolN(m, 0)["maxInstances"] = -1 }, "pools[0].maxInstances: -1: want 1 to 100000"},
		{"negative stack bound", func(m map[string]any) { m["maxInstances"] = -5 }, "maxInstances: -5: want 1 to 100000"},
		{"warm pool over the bound", func(m map[string]any) {
			poolN(m, 0)["maxInstances"] = 1
			poolN(m, 0)["warm"] = map[string]any{"schedules": []any{map[string]any{"name": "default", "hot": 2}}}
		},
			"pools[0].warm.schedules[0]: hot 2 + stopped 0 is more than maxInstances 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := jobsExample(t)
			tc.change(m)
			_, err := parseMap(t, m)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
