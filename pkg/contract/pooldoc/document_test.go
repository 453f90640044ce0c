package pooldoc

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghurl"
)

func sample(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/pool.json")
	require.NoError(t, err)
	return b
}

func TestParseSample(t *testing.T) {
	t.Parallel()
	d, err := Parse(sample(t))
	require.NoError(t, err)
	require.Equal(t, "linux-x64", d.Name)
	require.Equal(t, "aws", d.Partition, "default partition")
	require.Equal(t, AllocationCost, d.AllocationStrategy, "default allocation")
	require.Equal(t, "runner", d.Runner.User, "default runner user")
	require.Equal(t, "https://github.com", d.GitHubURL, "default GitHub server")
	require.Equal(t, 20*time.Minute, d.Timeout(state.Idle), "given timeout kept")
	require.Equal(t, 10*time.Minute, d.Timeout(state.Created), "default timeout")
	require.Equal(t, 6*time.Hour, d.Timeout(state.Running))
	require.Equal(t, 72*time.Hour, d.Timeout(state.Stopped))
	require.Equal(t, 5*time.Minute, d.Timeout(state.Claimed))
	require.Zero(t, d.Timeout(state.Terminated))
	require.Equal(t, "arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0", d.StateAccount().ARN("i-0123456789abcdef0"))
	require.Equal(t, "/hangar/prod/pools/linux-x64", ParameterName("prod", "linux-x64"))

	// A document survives a round trip.
	b, err := json.Marshal(d)
	require.NoError(t, err)
	again, err := Parse(b)
	require.NoError(t, err)
	require.Equal(t, d, again)
}

// TestParseRefusesBadFields: every bad field is reported with its name and value.
func TestParseRefusesBadFields(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mut  func(m map[string]any)
		want string
	}{
		{"schema", func(m map[string]any) { m["schemaVersion"] = 3 }, "schemaVersion: 3"},
		{"name", func(m map[string]any) { m["name"] = "Linux X64" }, `pool name "Linux X64" is malformed`},
		{"account", func(m map[string]any) { m["account"] = "abc" }, `account "abc" is malformed`},
		{"region", func(m map[string]any) { m["region"] = "mars" }, `region "mars" is malformed`},
		{"table", func(m map[string]any) { m["table"] = "" }, "table: empty"},
		{"queue", func(m map[string]any) { m["queueUrl"] = "hangar-q" }, `queueUrl: "hangar-q"`},
		{"github path", func(m map[string]any) { m["githubUrl"] = "https://ghe.example.com/octo" }, `githubUrl: "https://ghe.example.com/octo": want the server alone`},
		{"github userinfo", func(m map[string]any) { m["githubUrl"] = "https://x:y@ghe.example.com" }, `githubUrl: "https://x:y@ghe.example.com": want the server alone`},
		{"github plain http", func(m map[string]any) { m["githubUrl"] = "http://ghe.example.com" }, `githubUrl: "http://ghe.example.com": want an https URL`},
		{"github no scheme", func(m map[string]any) { m["githubUrl"] = "ghe.example.com" }, `githubUrl: "ghe.example.com": want an https URL`},
		{"template", func(m map[string]any) { m["launchTemplate"] = map[string]any{"id": "template-1", "version": "1"} }, `launchTemplate.id: "template-1"`},
		{"template version", func(m map[string]any) {
			m["launchTemplate"] = map[string]any{"id": "lt-0123456789abcdef0", "version": "latest"}
		}, `launchTemplate.version: "latest"`},
		{"spec hash", func(m map[string]any) { m["specHash"] = "" }, "specHash: empty"},
		{"no types", func(m map[string]any) { m["instanceTypes"] = []string{} }, "instanceTypes: empty"},
		{"bad type", func(m map[string]any) { m["instanceTypes"] = []string{"c7i*"} }, `instanceTypes: "c7i*"`},
		{"types and requirements", func(m map[string]any) {
			m["instanceRequirements"] = map[string]any{"arch": "x64", "vcpu": map[string]any{"min": 2}}
		},
			"instanceTypes: [c7i.large c6i.large] with instanceRequirements: want one or the other"},
		{"requirements arch", requirements(map[string]any{"arch": "amd64", "vcpu": map[string]any{"min": 2}}), `instanceRequirements.arch: "amd64": want x64 or arm64`},
		{"requirements vcpu", requirements(map[string]any{"arch": "x64", "vcpu": map[string]any{"min": 0}}), "instanceRequirements.vcpu.min: 0: want 1 or more"},
		{"requirements vcpu range", requirements(map[string]any{"arch": "x64", "vcpu": map[string]any{"min": 4, "max": 2}}), "instanceRequirements.vcpu.max: 2: want 0 (no bound) or at least min (4)"},
		{"requirements memory range", requirements(map[string]any{"arch": "x64", "vcpu": map[string]any{"min": 2}, "memoryMiB": map[string]any{"min": 8192, "max": 4096}}),
			"instanceRequirements.memoryMiB.max: 4096"},
		{"requirements max types", requirements(map[string]any{"arch": "x64", "vcpu": map[string]any{"min": 2}, "maxTypes": 100}), "instanceRequirements.maxTypes: 100: want 1 to 40"},
		{"no subnets", func(m map[string]any) { m["subnets"] = []any{} }, "subnets: empty"},
		{"bad subnet", func(m map[string]any) { m["subnets"] = []any{map[string]any{"id": "sn-1", "az": "a"}} }, `subnets: {id "sn-1"`},
		{"market", func(m map[string]any) { m["market"] = "reserved" }, `market: "reserved"`},
		{"allocation", func(m map[string]any) { m["allocationStrategy"] = "cheapest" }, `allocationStrategy: "cheapest"`},
		{"label", func(m map[string]any) { m["labels"] = []string{"has space"} }, `labels: "has space"`},
		{"repo", func(m map[string]any) { m["allowedRepositories"] = []string{"*/*"} }, `allowedRepositories: "*/*"`},
		{"no repos", func(m map[string]any) { delete(m, "allowedRepositories") }, "allowedRepositories: empty"},
		{"installation", func(m map[string]any) {
			m["jobs"] = map[string]any{"stackLabel": "hangar", "labels": []string{"linux"}, "installations": []int{11, -3}}
		}, "jobs.installations: -3"},
		{"reserved tag", func(m map[string]any) { m["tags"] = map[string]string{"hangar:pool": "x"} }, `tags: "hangar:pool": the hangar: prefix is reserved`},
		{"reserved tag any case", func(m map[string]any) { m["tags"] = map[string]string{"Hangar:Run": "x"} }, "reserved"},
		{"timeout", func(m map[string]any) { m["timeouts"] = map[string]any{"idle": "-5m"} }, "timeouts.idle: -5m0s"},
		{"timeout syntax", func(m map[string]any) { m["timeouts"] = map[string]any{"idle": "ten minutes"} }, `duration "ten minutes"`},
		{"timeout type", func(m map[string]any) { m["timeouts"] = map[string]any{"idle": 600} }, "duration 600"},
		{"unknown field", func(m map[string]any) { m["instanceType"] = "c7i.large" }, `unknown field "instanceType"`},
		{"zone", func(m map[string]any) { m["warm"] = map[string]any{"timezone": "Mars/Olympus"} }, `warm.timezone: "Mars/Olympus"`},
		{"day", func(m map[string]any) {
			m["warm"] = map[string]any{"schedules": []any{map[string]any{"name": "x", "days": []string{"funday"}, "hot": 1, "stopped": 0}}}
		}, `warm.schedules[0].days: "funday"`},
		{"half window", func(m map[string]any) {
			m["warm"] = map[string]any{"schedules": []any{map[string]any{"name": "x", "from": "22:00", "hot": 1, "stopped": 0}}}
		}, "give both or neither"},
		{"bad time", func(m map[string]any) {
			m["warm"] = map[string]any{"schedules": []any{map[string]any{"name": "x", "from": "25:00", "to": "06:00", "hot": 1, "stopped": 0}}}
		}, `warm.schedules[0].from: "25:00"`},
		{"negative warm", func(m map[string]any) {
			m["warm"] = map[string]any{"schedules": []any{map[string]any{"name": "x", "hot": -1, "stopped": 0}}}
		}, "hot -1"},
		{"runner version", func(m map[string]any) { m["runner"].(map[string]any)["version"] = "latest" }, `runner.version: "latest"`},
		{"runner url", func(m map[string]any) { m["runner"].(map[string]any)["baseUrl"] = "http://example.com/r" }, "plain http only for a loopback host"},
		{"runner sha", func(m map[string]any) { m["runner"].(map[string]any)["sha256"] = map[string]string{"x64": "abc"} }, `runner.sha256: x64: "abc"`},
		{"runner arch", func(m map[string]any) {
			m["runner"].(map[string]any)["sha256"] = map[string]string{"amd64": strings.Repeat("a", 64)}
		}, `arch "amd64"`},
		{"reuse", func(m map[string]any) { m["reuse"] = "org" }, `reuse: "org": want repository, owner, any or never`},
		{"sudo reused across repositories", func(m map[string]any) {
			m["reuse"] = "owner"
			m["runner"].(map[string]any)["sudo"] = true
		}, `reuse: "owner" with runner.sudo`},
		{"sudo reused by anyone", func(m map[string]any) {
			m["reuse"] = "any"
			m["runner"].(map[string]any)["sudo"] = true
		}, `reuse: "any" with runner.sudo`},
		{"runner root", func(m map[string]any) { m["runner"].(map[string]any)["user"] = "root" }, `runner.user: "root"`},
		{"log in summary", func(m map[string]any) { m["runner"].(map[string]any)["logInSummary"] = "public" }, `runner.logInSummary: "public": want auto, always or never`},
		{"writable dir relative", func(m map[string]any) { m["runner"].(map[string]any)["writableDirs"] = []string{"cache"} }, `runner.writableDirs: "cache": want a clean absolute path other than /`},
		{"writable dir root", func(m map[string]any) { m["runner"].(map[string]any)["writableDirs"] = []string{"/"} }, `runner.writableDirs: "/": want a clean absolute path`},
		{"writable dir unclean", func(m map[string]any) { m["runner"].(map[string]any)["writableDirs"] = []string{"/srv/../etc"} }, `runner.writableDirs: "/srv/../etc"`},
		{"writable dir system", func(m map[string]any) {
			m["runner"].(map[string]any)["writableDirs"] = []string{"/srv/cache", "/usr/local"}
		}, `runner.writableDirs: "/usr/local": a directory under /usr`},
		{"writable dirs too many", func(m map[string]any) {
			dirs := make([]string, 33)
			for i := range dirs {
				dirs[i] = "/srv/d" + strings.Repeat("x", i)
			}
			m["runner"].(map[string]any)["writableDirs"] = dirs
		}, "runner.writableDirs: 33 directories: want at most 32"},
		{"half runner", func(m map[string]any) { m["runner"] = map[string]any{"baseUrl": "https://x"} }, "runner.version: empty, but baseUrl or sha256 set"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var m map[string]any
			require.NoError(t, json.Unmarshal(sample(t), &m))
			tc.mut(m)
			b, _ := json.Marshal(m)
			_, err := Parse(b)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// requirements replaces the sample's instance types by requirements.
func requirements(r map[string]any) func(m map[string]any) {
	return func(m map[string]any) {
		delete(m, "instanceTypes")
		m["instanceRequirements"] = r
	}
}

func TestParseRequirements(t *testing.T) {
	t.Parallel()
	var m map[string]any
	require.NoError(t, json.Unmarshal(sample(t), &m))
	requirements(map[string]any{"arch": "arm64", "vcpu": map[string]any{"min": 2, "max": 4}, "memoryMiB": map[string]any{"min": 4096}})(m)
	b, err := json.Marshal(m)
	require.NoError(t, err)
	d, err := Parse(b)
	require.NoError(t, err)
	require.Empty(t, d.InstanceTypes)
	r := d.InstanceRequirements
	require.Equal(t, "arm64", r.EC2Arch())
	require.Equal(t, DefaultMaxTypes, r.Limit())
	require.True(t, r.VCPU.Contains(4))
	require.False(t, r.VCPU.Contains(8))
	require.True(t, r.MemoryMiB.Contains(1<<20), "no upper bound")
	require.False(t, r.MemoryMiB.Contains(2048))
}

func TestParseReportsAllProblemsAtOnce(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(`{"schemaVersion":2,"name":"p"}`))
	require.Error(t, err)
	for _, field := range []string{"table", "queueUrl", "launchTemplate.id", "specHash", "instanceTypes", "subnets", "market"} {
		require.Contains(t, err.Error(), field)
	}
}

func TestBakedRunner(t *testing.T) {
	t.Parallel()
	var m map[string]any
	require.NoError(t, json.Unmarshal(sample(t), &m))
	m["runner"] = map[string]any{}
	b, _ := json.Marshal(m)
	d, err := Parse(b)
	require.NoError(t, err, "no runner version: the AMI has one")
	require.Empty(t, d.Runner.Version)
}

func TestRepoAllowed(t *testing.T) {
	t.Parallel()
	d, err := Parse(sample(t))
	require.NoError(t, err)
	require.True(t, d.RepoAllowed("octo-org/api"))
	require.True(t, d.RepoAllowed("Octo-Org/API"), "GitHub names are case-insensitive")
	require.True(t, d.RepoAllowed("someone/app"))
	require.False(t, d.RepoAllowed("someone/other"))
	require.False(t, d.RepoAllowed("octo-org-evil/api"))
	d.AllowedRepositories = nil
	require.False(t, d.RepoAllowed("someone/app"), "a document without allowed repositories admits none")
}

func TestAdmits(t *testing.T) {
	t.Parallel()
	d, err := Parse(sample(t))
	require.NoError(t, err)
	d.Jobs = &Jobs{StackLabel: "hangar", Labels: []string{"linux"}}
	require.NoError(t, d.Admits("octo-org/api", 1), "no installations: the repository alone decides")
	require.ErrorIs(t, d.Admits("evil/api", 1), ErrRepository)
	d.Jobs.Installations = []int64{11, 12}
	require.NoError(t, d.Admits("octo-org/api", 12))
	require.ErrorIs(t, d.Admits("octo-org/api", 424242), ErrInstallation)
	require.ErrorIs(t, d.Admits("evil/api", 11), ErrRepository)
}

func TestWarmTargetAt(t *testing.T) {
	t.Parallel()
	d, err := Parse(sample(t))
	require.NoError(t, err)
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	at := func(s string) time.Time {
		tm, err := time.ParseInLocation("2006-01-02 15:04 Mon", s, paris)
		require.NoError(t, err)
		return tm
	}
	tests := []struct {
		when string
		want Target
	}{
		{"2026-11-23 12:00 Mon", Target{"default", 2, 0}},
		{"2026-11-23 22:00 Mon", Target{"nights", 0, 2}},
		{"2026-11-23 23:59 Mon", Target{"nights", 0, 2}},
		{"2026-11-24 05:59 Tue", Target{"nights", 0, 2}}, // Tuesday is listed: the early hours match too
		{"2026-11-24 06:00 Tue", Target{"default", 2, 0}},
		{"2026-11-27 23:00 Fri", Target{"nights", 0, 2}}, // "friday" in full
		{"2026-11-28 23:00 Sat", Target{"weekends", 0, 1}},
		{"2026-11-29 10:00 Sun", Target{"weekends", 0, 1}},
		{"2026-11-30 03:00 Mon", Target{"nights", 0, 2}},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, d.Warm.TargetAt(at(tc.when)), tc.when)
	}
	// The same instant, read in UTC, still uses Paris time.
	require.Equal(t, Target{"nights", 0, 2}, d.Warm.TargetAt(at("2026-11-23 22:30 Mon").UTC()))
	require.Equal(t, Target{}, Warm{}.TargetAt(time.Now()), "no schedule: no warm instances")
}

// TestShowsLogTo: the pool decides whether instances' log tails reach step summaries; by default
// only private and internal repositories see them, and an unknown visibility counts as public.
func TestShowsLogTo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		setting, visibility string
		want                bool
	}{
		{"", "public", false}, {"", "private", true}, {"", "internal", true}, {"", "", false}, {"", "secret", false},
		{"auto", "public", false}, {"auto", "private", true},
		{"always", "public", true}, {"always", "", true},
		{"never", "private", false}, {"never", "internal", false},
	} {
		require.Equal(t, tc.want, Runner{LogInSummary: tc.setting}.ShowsLogTo(tc.visibility), "%q for a %q repository", tc.setting, tc.visibility)
	}
}

// TestParseGitHubURL: the pinned server is kept without a trailing slash; the local world's
// plain-http stand-in is accepted only by a build with the localworld tag, and a release build
// refuses such a document when it loads it.
func TestParseGitHubURL(t *testing.T) {
	t.Parallel()
	parse := func(server string) (*Document, error) {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sample(t), &m))
		m["githubUrl"] = server
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return Parse(b)
	}
	d, err := parse("https://ghe.example.com/")
	require.NoError(t, err)
	require.Equal(t, "https://ghe.example.com", d.GitHubURL)

	d, err = parse("http://127.0.0.1:8080")
	if ghurl.LocalWorld {
		require.NoError(t, err)
		require.Equal(t, "http://127.0.0.1:8080", d.GitHubURL)
	} else {
		require.ErrorContains(t, err, `githubUrl: "http://127.0.0.1:8080": want an https URL`)
	}

	// A runner download from a loopback mirror may be plain http in every build: the tarball is
	// checked against the pool's SHA-256 whatever carried it, and no credential goes there.
	var m map[string]any
	require.NoError(t, json.Unmarshal(sample(t), &m))
	m["runner"].(map[string]any)["baseUrl"] = "http://127.0.0.1:8081/r"
	b, err := json.Marshal(m)
	require.NoError(t, err)
	_, err = Parse(b)
	require.NoError(t, err)
}
