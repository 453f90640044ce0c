package config

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

func example(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../hangar.example.yaml")
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(b, &m))
	return m
}

func TestExampleParses(t *testing.T) {
	t.Parallel()
	cfg, err := Load("../hangar.example.yaml")
	require.NoError(t, err)
	require.Equal(t, DefaultSchedule, cfg.Refresh.Schedule)
	require.NotEmpty(t, cfg.Pools)
	for _, p := range cfg.Pools {
		_, err := p.Document(Placeholders).Parsed()
		require.NoError(t, err, p.Name)
		require.Len(t, p.SpecHash("agent"), 16)
		require.NotEqual(t, p.SpecHash("agent"), p.SpecHash("agent-2"), "a new agent build is a new spec")
	}
}

// TestConfigErrors: every problem is reported, each naming its field and the bad value.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	pool0 := func(m map[string]any) map[string]any { return m["pools"].([]any)[0].(map[string]any) }
	tests := []struct {
		name string
		mut  func(m map[string]any)
		want string
	}{
		{"stack", func(m map[string]any) { m["stack"] = "Hangar Prod!" }, `stack: "Hangar Prod!"`},
		{"no repositories", func(m map[string]any) { m["github"] = map[string]any{} }, "github.repositories: empty"},
		{"repository", func(m map[string]any) { m["github"] = map[string]any{"repositories": []any{"*"}} }, `github.repositories: "*": want owner/name or owner/*`},
		{"oidc", func(m map[string]any) {
			m["github"].(map[string]any)["oidcProviderArn"] = "arn:aws:iam::123456789012:oidc-provider/example.com"
		}, "github.oidcProviderArn"},
		{"schedule", func(m map[string]any) { m["refresh"] = map[string]any{"schedule": "every minute"} }, `refresh.schedule: "every minute"`},
		{"no pools", func(m map[string]any) { m["pools"] = []any{} }, "pools: empty"},
		{"unknown field", func(m map[string]any) { pool0(m)["instanceType"] = "c7i.large" }, `unknown field "instanceType"`},
		{"two images", func(m map[string]any) { pool0(m)["image"].(map[string]any)["ami"] = "ami-0123456789abcdef0" }, "pools[0].image: want exactly one of"},
		{"arch", func(m map[string]any) { pool0(m)["image"].(map[string]any)["arch"] = "amd64" }, `pools[0].image.arch: "amd64"`},
		{"disk", func(m map[string]any) { pool0(m)["disk"] = map[string]any{"sizeGiB": 4} }, "pools[0].disk.sizeGiB: 4"},
		{"hop limit", func(m map[string]any) { pool0(m)["metadataHopLimit"] = 3 }, "pools[0].metadataHopLimit: 3"},
		{"security group", func(m map[string]any) { pool0(m)["securityGroups"] = []any{"default"} }, `pools[0].securityGroups: "default"`},
		{"outside repository", func(m map[string]any) { pool0(m)["allowedRepositories"] = []any{"evil/app"} }, `pools[0].allowedRepositories: "evil/app" is not among`},
		{"pool document: market", func(m map[string]any) { pool0(m)["market"] = "reserved" }, `market: "reserved"`},
		{"pool document: sudo", func(m map[string]any) {
			pool0(m)["reuse"] = "any"
			pool0(m)["runner"].(map[string]any)["sudo"] = true
		}, `reuse: "any" with runner.sudo`},
		{"duplicate pool", func(m map[string]any) { m["pools"] = append(m["pools"].([]any), m["pools"].([]any)[0]) }, "pools[1].name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := example(t)
			tc.mut(m)
			b, err := yaml.Marshal(m)
			require.NoError(t, err)
			_, err = Parse(b)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	// All at once.
	m := example(t)
	m["stack"] = ""
	m["refresh"] = map[string]any{"schedule": "x"}
	b, _ := yaml.Marshal(m)
	_, err := Parse(b)
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "stack:") && strings.Contains(err.Error(), "refresh.schedule:"), err.Error())
}
