package action_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/hangar-ci/hangar/internal/wire/step"
)

// root is the repository's root (the action's directory).
var root = func() string {
	r, err := filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	return r
}()

// manifest is the part of action.yml the checks read.
type manifest struct {
	Inputs map[string]struct {
		Description *string `yaml:"description"`
		Default     *string `yaml:"default"`
	} `yaml:"inputs"`
	Outputs map[string]struct {
		Description string `yaml:"description"`
		Value       string `yaml:"value"`
	} `yaml:"outputs"`
	Runs struct {
		Using string `yaml:"using"`
		Steps []struct {
			ID  string            `yaml:"id"`
			Env map[string]string `yaml:"env"`
			Run string            `yaml:"run"`
		} `yaml:"steps"`
	} `yaml:"runs"`
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	require.NoError(t, err)
	return string(b)
}

// scriptInputs are the inputs scripts/action.sh reads itself (they choose and fetch the binary).
var scriptInputs = []string{"mode", "version", "release-url"}

// envName is the variable action.yml maps an input to.
func envName(input string) string {
	return "HANGAR_" + strings.ToUpper(strings.ReplaceAll(input, "-", "_"))
}

func keys[M ~map[string]V, V any](m M) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func uniq(xs []string) []string {
	out := slices.Clone(xs)
	sort.Strings(out)
	return slices.Compact(out)
}

// TestInputsAndOutputs checks action.yml against the step binaries both ways: every input is
// declared with a description and a default, is passed to the step, and is read by a binary (with
// the same default) or by the script; every input a binary reads is declared; every output is
// declared, wired to the step, and set by a binary; nothing else is read or set.
func TestInputsAndOutputs(t *testing.T) {
	var m manifest
	require.NoError(t, yaml.Unmarshal([]byte(read(t, "action.yml")), &m))
	require.Equal(t, "composite", m.Runs.Using)
	require.Len(t, m.Runs.Steps, 1)
	st := m.Runs.Steps[0]

	// What the binaries and the script read.
	defaults := map[string]string{}
	var read_ []string
	for _, list := range [][]step.Input{step.ProvisionInputs, step.ReleaseInputs, step.RefreshInputs} {
		for _, in := range list {
			read_ = append(read_, in.Name)
			if d, ok := defaults[in.Name]; ok {
				require.Equal(t, d, in.Default, "input %s: two steps disagree on its default", in.Name)
			}
			defaults[in.Name] = in.Default
		}
	}
	read_ = uniq(append(read_, scriptInputs...))
	require.Equal(t, read_, keys(m.Inputs), "action.yml's inputs (right) must be exactly those the steps read (left)")

	for name, in := range m.Inputs {
		require.NotNil(t, in.Description, "input %s: no description", name)
		require.NotEmpty(t, strings.TrimSpace(*in.Description), "input %s: empty description", name)
		require.NotNil(t, in.Default, "input %s: no default", name)
		if d, ok := defaults[name]; ok {
			require.Equal(t, d, *in.Default, "input %s: action.yml's default differs from the step's", name)
		}
		require.Equal(t, "${{ inputs."+name+" }}", st.Env[envName(name)], "input %s reaches the step as %s", name, envName(name))
	}
	// No expression reads an input that is not declared.
	for _, ref := range regexp.MustCompile(`inputs\.([a-z0-9-]+)`).FindAllStringSubmatch(read(t, "action.yml"), -1) {
		require.Contains(t, m.Inputs, ref[1], "action.yml reads inputs.%s, which it does not declare", ref[1])
	}

	// The script reads only what the step's environment gives it, and uses what is meant for it.
	script := read(t, "scripts/action.sh")
	for _, v := range uniq(regexp.MustCompile(`HANGAR_[A-Z_]+`).FindAllString(script, -1)) {
		require.Contains(t, st.Env, v, "scripts/action.sh reads %s, which action.yml does not set", v)
	}
	for _, in := range scriptInputs {
		require.Contains(t, script, envName(in), "scripts/action.sh never reads %s (input %s)", envName(in), in)
	}
	for v := range st.Env {
		in := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(v, "HANGAR_"), "_", "-"))
		if _, ok := m.Inputs[in]; ok && !slices.Contains(scriptInputs, in) {
			continue // an input a binary reads (checked above)
		}
		require.Contains(t, script, v, "action.yml sets %s for the step, and nothing reads it", v)
	}

	// Outputs: declared = set by the binaries, each wired to the step's output.
	outputs := uniq(append(slices.Clone(step.ProvisionOutputs), step.RefreshOutputs...))
	require.Equal(t, outputs, keys(m.Outputs))
	for name, out := range m.Outputs {
		require.NotEmpty(t, out.Description, "output %s: no description", name)
		require.Equal(t, "${{ steps."+st.ID+".outputs."+name+" }}", out.Value, "output %s", name)
	}
	var set []string
	for _, f := range sources(t, "cmd") {
		for _, c := range regexp.MustCompile(`step\.Output\(gha, "([a-z-]+)"`).FindAllStringSubmatch(read(t, f), -1) {
			set = append(set, c[1])
		}
	}
	require.Equal(t, outputs, uniq(set), "the outputs the binaries set (right) must be exactly those declared (left)")
}

// TestModesAndReleaseAssets: the script's modes, the binaries make dist builds and the names the
// script downloads agree: provision and release are their own commands; refresh is hangar's
// refresh command, whose asset is hangar-<os>-<arch>.
func TestModesAndReleaseAssets(t *testing.T) {
	mk := read(t, "Makefile")
	cmds := strings.Fields(regexp.MustCompile(`(?m)^DIST_CMDS\s*:=(.*)$`).FindStringSubmatch(mk)[1])
	require.ElementsMatch(t, []string{"provision", "release", "hangar"}, cmds)
	for _, c := range cmds {
		require.FileExists(t, filepath.Join(root, "cmd", c, "main.go"))
	}
	platforms := strings.Fields(regexp.MustCompile(`(?m)^DIST_PLATFORMS\s*:=(.*)$`).FindStringSubmatch(mk)[1])
	require.Subset(t, platforms, []string{"linux/amd64", "linux/arm64", "darwin/arm64"}, "GitHub's hosted runners")
	script := read(t, "scripts/action.sh")
	require.Contains(t, script, "provision|release) cmd=$mode; name=hangar-$mode; sub= ;;")
	require.Contains(t, script, "refresh) cmd=hangar; name=hangar; sub=refresh ;;")
	require.Contains(t, script, `asset="$name-$os-$arch$ext"`)
	require.Contains(t, script, `"./cmd/$cmd"`)
	require.Contains(t, mk, "name=hangar-$$c; [ $$c = hangar ] && name=hangar;")
	require.Contains(t, mk, "dist/$$name-$$os-$$a$$ext ./cmd/$$c")
	require.Contains(t, mk, "sha256sum hangar-* > checksums.txt")
}

// sources lists the Go files (tests excluded) under dir.
func sources(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return err
	}))
	return out
}
