package layout

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/hangar-ci/hangar/"

// deps returns, for every package matched by patterns, the packages it imports directly or
// indirectly, test files excluded.
func deps(t *testing.T, patterns ...string) map[string][]string {
	t.Helper()
	args := append([]string{"list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = "../../.."
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("go list: %v\n%s", err, exit.Stderr)
	}
	require.NoError(t, err)
	got := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		got[f[0]] = f[1:]
	}
	require.NotEmpty(t, got, "go list matched no package")
	return got
}

// TestShippedCodeDoesNotImportTheTestWorld: nothing that ends up in a binary depends on the
// stand-ins, the simulator or the tools.
func TestShippedCodeDoesNotImportTheTestWorld(t *testing.T) {
	got := deps(t, "./cmd/...", "./pkg/...", "./internal/wire/...")
	require.Contains(t, got, module+"cmd/provision", "the product packages were listed")
	for pkg, ds := range got {
		for _, d := range ds {
			for _, banned := range []string{module + "internal/testkit", module + "internal/checks", module + "internal/cmd"} {
				require.False(t, d == banned || strings.HasPrefix(d, banned+"/"), "%s imports %s: shipped code may not depend on %s/...", pkg, d, banned)
			}
		}
	}
}

// TestUseCasesKnowNothingOfActionsOrLambda: the packages under pkg/ are driven by adapters in
// cmd/ and internal/wire/; they never import the Actions toolkit or the Lambda runtime.
func TestUseCasesKnowNothingOfActionsOrLambda(t *testing.T) {
	for pkg, ds := range deps(t, "./pkg/...") {
		for _, d := range ds {
			for _, banned := range []string{"github.com/sethvargo/go-githubactions", "github.com/aws/aws-lambda-go"} {
				require.False(t, strings.HasPrefix(d, banned), "%s imports %s", pkg, d)
			}
		}
	}
}

// linkRule is what one binary must not link: module paths (a package, or any package under a
// module such as github.com/google/go-github) and why.
type linkRule struct {
	binary string
	banned []string
	why    string
}

const (
	actionsToolkit = "github.com/sethvargo/go-githubactions"
	lambdaRuntime  = "github.com/aws/aws-lambda-go"
	githubClient   = "github.com/google/go-github"
	appAuth        = "github.com/bradleyfalzon/ghinstallation"
)

// linkRules is what each binary may not link. The Lambda bootstrap (cmd/refresh) holds refresh
// alone: the action's refresh step is cmd/hangar; it may name runners (ghapi's vocabulary) but
// links no GitHub client. The agent runs on the instances: neither the Actions toolkit nor the
// Lambda runtime, nor a GitHub client (the runner talks to GitHub, not the agent). The action's
// steps never run in Lambda.
var linkRules = []linkRule{
	{"cmd/refresh", []string{actionsToolkit, githubClient, appAuth, module + "pkg/platform/ghclient", module + "pkg/platform/ghapp",
		module + "pkg/steps", module + "pkg/labels", module + "internal/wire/step"},
		"the refresh Lambda links no GitHub client, the Actions toolkit or the doors"},
	{"cmd/agent", []string{actionsToolkit, lambdaRuntime, appAuth, githubClient, module + "pkg/platform/ghclient", module + "pkg/platform/ghapp",
		module + "pkg/labels", module + "pkg/steps"},
		"the agent is neither an action step nor a Lambda, calls no GitHub API, and nothing of the GitHub App reaches an instance"},
	{"cmd/agent/runas", []string{"github.com/aws", githubClient, module + "pkg/instance/agent", module + "pkg/instance/host", module + "pkg/contract/state", module + "internal"},
		"the agent's helper starts for every runner script: it links no AWS or GitHub code (whose package initialisation is most of the agent's start-up), nor package net (0.8 ms of CPU at every start: exactBans), only package runas"},
	{"cmd/webhook", []string{actionsToolkit, module + "pkg/steps", module + "internal/wire/step"},
		"the label-routed jobs' functions are not an action step"},
	{"cmd/provision", []string{lambdaRuntime}, "an action step is not a Lambda"},
	{"cmd/release", []string{lambdaRuntime}, "an action step is not a Lambda"},
	{"cmd/hangar", []string{lambdaRuntime}, "an action step is not a Lambda"},
}

// exactBans are packages a binary may not link themselves, though it may link packages under
// them (net, not net/netip); linkRules says why.
var exactBans = map[string][]string{"cmd/agent/runas": {"net"}}

// banned returns the first of deps that matches a banned path (the path itself or under it).
func banned(deps, paths []string) (string, bool) {
	for _, d := range deps {
		for _, b := range paths {
			if d == b || strings.HasPrefix(d, b+"/") || (b == githubClient && strings.HasPrefix(d, b)) {
				return d, true
			}
		}
	}
	return "", false
}

// TestWhatEachBinaryLinks checks every binary against linkRules, with the tags each is built
// with (the Lambda bootstrap with lambda.norpc, as make infra-assets builds it); every binary
// under cmd/ has a rule.
func TestWhatEachBinaryLinks(t *testing.T) {
	cmds, err := filepath.Glob("../../../cmd/*/main.go")
	require.NoError(t, err)
	nested, err := filepath.Glob("../../../cmd/*/*/main.go")
	require.NoError(t, err)
	cmds = append(cmds, nested...)
	var ruled []string
	for _, r := range linkRules {
		ruled = append(ruled, r.binary)
	}
	for _, c := range cmds {
		rel, err := filepath.Rel("../../..", filepath.Dir(c))
		require.NoError(t, err)
		require.Contains(t, ruled, filepath.ToSlash(rel), "a binary with no rule in linkRules")
	}
	for _, tags := range []string{"", "lambda.norpc"} {
		for _, r := range linkRules {
			got := deps(t, tagged(tags, "./"+r.binary)...)
			require.Contains(t, got, module+r.binary)
			d, bad := banned(got[module+r.binary], r.banned)
			require.False(t, bad, "%s (tags %q) links %s: %s", r.binary, tags, d, r.why)
			for _, e := range exactBans[r.binary] {
				require.NotContains(t, got[module+r.binary], e, "%s (tags %q) links %s: %s", r.binary, tags, e, r.why)
			}
		}
	}
}

// tagged prepends -tags to go list's arguments when tags is set.
func tagged(tags string, patterns ...string) []string {
	if tags == "" {
		return patterns
	}
	return append([]string{"-tags", tags}, patterns...)
}

// role is what a package under pkg/ is for, by the folder it sits in (pkg/README.md).
func role(pkg string) string {
	rel := strings.TrimPrefix(pkg, module+"pkg/")
	switch {
	case rel == "contract/names":
		return "names"
	case strings.HasPrefix(rel, "platform/"):
		return "platform"
	case strings.HasPrefix(rel, "contract/"):
		return "contract"
	case rel == "pool":
		return "pool"
	case strings.HasPrefix(rel, "pool/"):
		return "pool part"
	case strings.HasPrefix(rel, "steps/"), strings.HasPrefix(rel, "labels/"):
		return "door"
	case rel == "refresh", strings.HasPrefix(rel, "refresh/"):
		return "upkeep"
	case rel == "operator", strings.HasPrefix(rel, "operator/"):
		return "operator"
	case strings.HasPrefix(rel, "instance/"):
		return "instance"
	}
	return ""
}

// mayImport is, for each role, the roles its packages may import: down the layers, never up.
// The doors see the pool, never its parts (they call pool.Acquire and pool.GiveBack), never each
// other; the instance sees only the contract, the platform and its own doorbell.
var mayImport = map[string][]string{
	"names":     {},
	"platform":  {"names", "platform"},
	"contract":  {"names", "platform", "contract"},
	"pool part": {"names", "platform", "contract"},
	"pool":      {"names", "platform", "contract", "pool part"},
	"door":      {"names", "platform", "contract", "pool"},
	"upkeep":    {"names", "platform", "contract", "pool", "pool part", "upkeep"},
	"operator":  {"names", "platform", "contract", "pool", "pool part", "operator"},
	"instance":  {"names", "platform", "contract", "instance"},
}

// allowed are the imports across the layers a role may make besides: the agent listens on its
// own doorbell, whose listener lives with the bells that ring it.
var allowed = map[string][]string{"instance": {module + "pkg/pool/doorbell"}}

// TestRolesImportDownward: ls pkg shows the architecture (the doors, the pool, its upkeep, the
// contract, the instance, the operator, the platform), every package sits in one of those
// folders, and imports only what its role may: no cycle, nothing that climbs back up.
func TestRolesImportDownward(t *testing.T) {
	entries, err := os.ReadDir("../../../pkg")
	require.NoError(t, err)
	var folders []string
	for _, e := range entries {
		if e.IsDir() {
			folders = append(folders, e.Name())
		}
	}
	require.ElementsMatch(t, []string{"contract", "instance", "labels", "operator", "platform", "pool", "refresh", "steps"}, folders,
		"pkg/ holds one folder per role (pkg/README.md)")
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./pkg/...")
	cmd.Dir = "../../.."
	out, err := cmd.Output()
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		from := role(f[0])
		require.NotEmpty(t, from, "%s is in no role's folder", f[0])
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to := role(imp)
			ok := slices.Contains(mayImport[from], to) || slices.Contains(allowed[from], imp)
			if from == "door" && to == "door" {
				ok = false
			}
			require.True(t, ok, "%s (%s) imports %s (%s): a %s may import only %v", f[0], from, imp, to, from, mayImport[from])
		}
	}
}
