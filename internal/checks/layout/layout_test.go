package layout

import (
	"errors"
	"os/exec"
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
