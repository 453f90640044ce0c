package config

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
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

// TestHistoryDays: history.days (90 unless set) reaches every pool document, where the control
// plane reads how long to keep what it ends.
func TestHistoryDays(t *testing.T) {
	t.Parallel()
	cfg, err := Load("../hangar.example.yaml")
	require.NoError(t, err)
	require.Equal(t, 90, cfg.History.Days)
	cfg.History.Days = 30
	require.NoError(t, cfg.Validate())
	for _, p := range cfg.Pools {
		d := Placeholders
		d.HistoryDays = cfg.History.Days
		doc, err := p.Document(d).Parsed()
		require.NoError(t, err, p.Name)
		require.Equal(t, 30*24*time.Hour, doc.HistoryRetention())
	}
}

// TestServerPinned: every pool document pins the stack's GitHub server, github.com unless the
// config names an enterprise server.
func TestServerPinned(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ server, want string }{{"", "https://github.com"}, {"https://ghe.example.com", "https://ghe.example.com"}} {
		m := example(t)
		if tc.server != "" {
			m["github"].(map[string]any)["serverUrl"] = tc.server
		}
		b, err := json.Marshal(m)
		require.NoError(t, err)
		cfg, err := Parse(b)
		require.NoError(t, err)
		require.Equal(t, tc.want, cfg.GitHub.ServerURL)
		d := Placeholders
		d.GitHubURL = cfg.GitHub.ServerURL
		doc, err := cfg.Pools[0].Document(d).Parsed()
		require.NoError(t, err)
		require.Equal(t, tc.want, doc.GitHubURL)
	}
}

// TestTrustSetInDocuments: a pool that names no allowedRepositories gets github.repositories in
// its document, one that names some keeps them, and every jobs section carries the stack's
// installations.
func TestTrustSetInDocuments(t *testing.T) {
	t.Parallel()
	cfg, err := Load("../hangar.example.yaml")
	require.NoError(t, err)
	d := Placeholders
	d.Repositories, d.Installations = []string{"octo/*", "acme/api"}, []int64{11}
	p := cfg.Pools[0]
	p.AllowedRepositories = nil
	p.Jobs = &Jobs{Labels: []string{"linux-x64"}}
	doc, err := p.Document(d).Parsed()
	require.NoError(t, err)
	require.Equal(t, []string{"octo/*", "acme/api"}, doc.AllowedRepositories)
	require.Equal(t, []int64{11}, doc.Jobs.Installations)
	require.NoError(t, doc.Admits("acme/api", 11))
	require.Error(t, doc.Admits("acme/web", 11))
	require.Error(t, doc.Admits("octo/app", 12))

	p.AllowedRepositories = []string{"octo/app"}
	doc, err = p.Document(d).Parsed()
	require.NoError(t, err)
	require.Equal(t, []string{"octo/app"}, doc.AllowedRepositories)
}

// pool0 is the first pool of a config read as a map.
func pool0(m map[string]any) map[string]any { return m["pools"].([]any)[0].(map[string]any) }

// TestRequirementsPool: a pool may choose its types by size; the arch is the image's.
func TestRequirementsPool(t *testing.T) {
	t.Parallel()
	m := example(t)
	delete(pool0(m), "instanceTypes")
	pool0(m)["instanceRequirements"] = map[string]any{"vcpu": map[string]any{"min": 2, "max": 8}, "memoryMiB": map[string]any{"min": 4096}}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	cfg, err := Parse(b)
	require.NoError(t, err)
	p := &cfg.Pools[0]
	doc, err := p.Document(Placeholders).Parsed()
	require.NoError(t, err)
	require.Empty(t, doc.InstanceTypes)
	require.Equal(t, &pooldoc.Requirements{Arch: "x64", VCPU: pooldoc.Range{Min: 2, Max: 8}, MemoryMiB: pooldoc.Range{Min: 4096}}, doc.InstanceRequirements)
	before := p.SpecHash("agent")
	p.InstanceRequirements.VCPU.Max = 16
	require.NotEqual(t, before, p.SpecHash("agent"), "other sizes are another spec")
}

// TestConfigErrors: every problem is reported, each naming its field and the bad value.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
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
		{"server path", func(m map[string]any) { m["github"].(map[string]any)["serverUrl"] = "https://ghe.example.com/octo" },
			`github.serverUrl: "https://ghe.example.com/octo": want the server alone`},
		{"server plain http", func(m map[string]any) { m["github"].(map[string]any)["serverUrl"] = "http://ghe.example.com" },
			`github.serverUrl: "http://ghe.example.com": want an https URL`},
		{"installation", func(m map[string]any) { m["github"].(map[string]any)["installations"] = []any{11, 0} },
			"github.installations: 0: want distinct App installation ids"},
		{"installation twice", func(m map[string]any) { m["github"].(map[string]any)["installations"] = []any{11, 11} },
			"github.installations: 11"},
		{"alarm topic", func(m map[string]any) { m["alarms"] = map[string]any{"topicArn": "ci-alarms"} }, `alarms.topicArn: "ci-alarms": want an SNS topic's ARN`},
		{"alarm email", func(m map[string]any) { m["alarms"] = map[string]any{"emails": []any{"oncall"}} }, `alarms.emails: "oncall": want distinct email addresses`},
		{"schedule", func(m map[string]any) { m["refresh"] = map[string]any{"schedule": "every minute"} }, `refresh.schedule: "every minute"`},
		{"no pools", func(m map[string]any) { m["pools"] = []any{} }, "pools: empty"},
		{"history days", func(m map[string]any) { m["history"] = map[string]any{"days": -1} }, "history.days: -1: want 1 to 3650"},
		{"history years", func(m map[string]any) { m["history"] = map[string]any{"days": 4000} }, "history.days: 4000: want 1 to 3650"},
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
		{"pool document: writable dirs", func(m map[string]any) {
			pool0(m)["runner"].(map[string]any)["writableDirs"] = []any{"/srv/cache", "/etc/app"}
		}, `runner.writableDirs: "/etc/app": a directory under /etc`},
		{"pool document: log in summary", func(m map[string]any) { pool0(m)["runner"].(map[string]any)["logInSummary"] = "yes" }, `runner.logInSummary: "yes": want auto, always or never`},
		{"types and requirements", func(m map[string]any) {
			pool0(m)["instanceRequirements"] = map[string]any{"vcpu": map[string]any{"min": 2}}
		},
			"instanceTypes: [c7i.large c6i.large m7i.large] with instanceRequirements: want one or the other"},
		{"requirements arch", func(m map[string]any) {
			delete(pool0(m), "instanceTypes")
			pool0(m)["instanceRequirements"] = map[string]any{"arch": "arm64", "vcpu": map[string]any{"min": 2}}
		}, `pools[0].instanceRequirements.arch: "arm64": the image is x64`},
		{"requirements range", func(m map[string]any) {
			delete(pool0(m), "instanceTypes")
			pool0(m)["instanceRequirements"] = map[string]any{"vcpu": map[string]any{"min": 8, "max": 4}}
		}, "instanceRequirements.vcpu.max: 4: want 0 (no bound) or at least min (8)"},
		{"vpc and subnets", func(m map[string]any) { pool0(m)["vpc"] = map[string]any{"default": true} }, "pools[0].vpc: with subnets: want one or the other"},
		{"vpc id or default", func(m map[string]any) {
			delete(pool0(m), "subnets")
			pool0(m)["vpc"] = map[string]any{"id": "vpc-0123456789abcdef0", "default": true}
		}, "pools[0].vpc: want exactly one of id (vpc-…) or default: true"},
		{"vpc id", func(m map[string]any) {
			delete(pool0(m), "subnets")
			pool0(m)["vpc"] = map[string]any{"id": "main"}
		}, `pools[0].vpc.id: "main": want vpc- and hex digits`},
		{"vpc subnet type", func(m map[string]any) {
			delete(pool0(m), "subnets")
			pool0(m)["vpc"] = map[string]any{"default": true, "subnetType": "dmz"}
		}, `pools[0].vpc.subnetType: "dmz": want private, isolated or public`},
		{"subnets without their vpc", func(m map[string]any) { delete(pool0(m), "vpcId") },
			"pools[0].vpcId: empty: the pool lists subnets and no securityGroups, so the stack makes it a security group with no ingress"},
		{"vpc id malformed", func(m map[string]any) { pool0(m)["vpcId"] = "default" }, `pools[0].vpcId: "default": want vpc- and hex digits`},
		{"vpc id with a lookup", func(m map[string]any) {
			delete(pool0(m), "subnets")
			pool0(m)["vpc"] = map[string]any{"default": true}
		}, `pools[0].vpcId: "vpc-0123456789abcdef0" with vpc: the lookup finds the VPC`},
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

// TestSecurityGroupsOrVPC: listed subnets need their VPC only for the pool's own security group;
// a pool that names its groups needs no vpcId.
func TestSecurityGroupsOrVPC(t *testing.T) {
	t.Parallel()
	m := example(t)
	delete(pool0(m), "vpcId")
	pool0(m)["securityGroups"] = []any{"sg-0123456789abcdef0"}
	b, err := yaml.Marshal(m)
	require.NoError(t, err)
	cfg, err := Parse(b)
	require.NoError(t, err)
	require.Empty(t, cfg.Pools[0].VPCID)
}
