package docscheck_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
)

const root = "../../.."

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	require.NoError(t, err)
	return string(b)
}

// docs are the pages a user reads.
func docs(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	out := []string{"README.md", "cmd/agent/README.md", "infra/README.md", "internal/README.md"}
	for _, p := range pages {
		out = append(out, "docs/"+filepath.Base(p))
	}
	return out
}

// blocks returns the fenced code blocks of lang in md.
func blocks(md, lang string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?s)```"+lang+"\n(.*?)```").FindAllStringSubmatch(md, -1) {
		out = append(out, m[1])
	}
	return out
}

// userFiles are paths the docs tell the reader to create.
var userFiles = []string{"infra/hangar.yaml"}

// TestPathsExist: every repository path a page names exists (but those it tells the reader to
// create).
func TestPathsExist(t *testing.T) {
	path := regexp.MustCompile(`\b(?:docs|examples|cmd|pkg|internal|infra|scripts|tools)/[A-Za-z0-9_./-]*[A-Za-z0-9_]\.(?:md|yml|yaml|go|sh|mod)\b`)
	for _, page := range docs(t) {
		for _, p := range path.FindAllString(read(t, page), -1) {
			if strings.HasPrefix(p, "infra/") || strings.HasPrefix(p, "docs/") || strings.HasPrefix(p, "examples/") ||
				strings.HasPrefix(p, "cmd/") || strings.HasPrefix(p, "pkg/") || strings.HasPrefix(p, "internal/") ||
				strings.HasPrefix(p, "scripts/") || strings.HasPrefix(p, "tools/") {
				if slices.Contains(userFiles, p) {
					continue
				}
				_, err := os.Stat(filepath.Join(root, p))
				require.NoError(t, err, "%s names %s", page, p)
			}
		}
	}
}

// makeTargets are the Makefile's documented targets (those make help lists).
func makeTargets(t *testing.T) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^([a-zA-Z_-]+):.*## `).FindAllStringSubmatch(read(t, "Makefile"), -1) {
		out = append(out, m[1])
	}
	return out
}

// TestMakeCommands: every make command a page gives is a documented target, and make accepts it
// (make -n: what it would run, without running it).
func TestMakeCommands(t *testing.T) {
	targets := makeTargets(t)
	seen := map[string]bool{}
	for _, page := range docs(t) {
		for _, m := range regexp.MustCompile("`make ([a-z-]+)[^`]*`|(?m)^make ([a-z-]+)").FindAllStringSubmatch(read(t, page), -1) {
			target := m[1] + m[2]
			require.Contains(t, targets, target, "%s: make %s is not a target", page, target)
			seen[target] = true
		}
	}
	for target := range seen {
		cmd := exec.Command("make", "-n", target)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "make -n %s: %s", target, out)
	}
}

// TestReadmeSetup: the README's set-up is make demo and make test, nothing else, and its
// workflows are examples/labels.yml and examples/workflow.yml as they are.
func TestReadmeSetup(t *testing.T) {
	readme := read(t, "README.md")
	sh := blocks(readme, "sh")
	require.Len(t, sh, 1)
	var cmds []string
	for _, line := range strings.Split(strings.TrimSpace(sh[0]), "\n") {
		cmd, _, _ := strings.Cut(line, "#")
		cmds = append(cmds, strings.TrimSpace(cmd))
	}
	require.Equal(t, []string{"make demo", "make test"}, cmds)
	yml := blocks(readme, "yaml")
	require.Len(t, yml, 2)
	require.Equal(t, read(t, "examples/labels.yml"), yml[0])
	require.Equal(t, read(t, "examples/workflow.yml"), yml[1])
	require.Contains(t, readme, "```mermaid")
}

// actionInputs are action.yml's inputs and defaults, and its outputs.
func actionManifest(t *testing.T) (inputs map[string]string, outputs []string) {
	var m struct {
		Inputs  map[string]struct{ Default string } `yaml:"inputs"`
		Outputs map[string]any                      `yaml:"outputs"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(read(t, "action.yml")), &m))
	inputs = map[string]string{}
	for k, v := range m.Inputs {
		inputs[k] = v.Default
	}
	for k := range m.Outputs {
		outputs = append(outputs, k)
	}
	return inputs, outputs
}

// TestActionSnippets: every use of the action in the docs and examples passes only inputs the
// action declares, with a mode it has.
func TestActionSnippets(t *testing.T) {
	inputs, _ := actionManifest(t)
	var snippets []string
	for _, page := range docs(t) {
		snippets = append(snippets, blocks(read(t, page), "yaml")...)
	}
	examples, err := filepath.Glob(filepath.Join(root, "examples", "*.yml"))
	require.NoError(t, err)
	for _, e := range examples {
		b, err := os.ReadFile(e)
		require.NoError(t, err)
		snippets = append(snippets, string(b))
	}
	uses := 0
	for _, s := range snippets {
		var doc any
		require.NoError(t, yaml.Unmarshal([]byte(strings.TrimLeft(dedent(s), "\n")), &doc), "%s", s)
		walk(doc, func(step map[string]any) {
			if step["uses"] != "hangar-ci/hangar@v1" {
				return
			}
			uses++
			with, _ := step["with"].(map[string]any)
			require.Contains(t, []any{"provision", "release", "refresh"}, with["mode"], "%v", step)
			for k := range with {
				require.Contains(t, inputs, k, "a snippet passes %s, which the action does not declare", k)
			}
		})
	}
	require.GreaterOrEqual(t, uses, 4)
}

// dedent removes the indentation the snippet's first line has.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	indent := len(lines[0]) - len(strings.TrimLeft(lines[0], " "))
	for i, l := range lines {
		if len(l) >= indent {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}

func walk(v any, step func(map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["uses"]; ok {
			step(x)
		}
		for _, c := range x {
			walk(c, step)
		}
	case []any:
		for _, c := range x {
			walk(c, step)
		}
	}
}

// TestConfigurationTables: docs/configuration.md lists every action input with its default,
// every output, and every agent flag, and nothing that is not one.
func TestConfigurationTables(t *testing.T) {
	conf := read(t, "docs/configuration.md")
	inputs, outputs := actionManifest(t)
	for name, def := range inputs {
		want := "| `" + name + "` | (empty) |"
		if def != "" {
			want = "| `" + name + "` | `" + def + "` |"
		}
		require.Contains(t, conf, want, "input %s", name)
	}
	for _, name := range outputs {
		require.Contains(t, conf, "| `"+name+"` | ", "output %s", name)
	}

	bin := testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/agent")
	out, err := exec.Command(bin, "-h").CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err)
	}
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags = append(flags, m[1])
	}
	require.NotEmpty(t, flags, "%s", out)
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z-]+)` \\| `HANGAR_").FindAllStringSubmatch(conf, -1) {
		documented = append(documented, m[1])
	}
	slices.Sort(flags)
	slices.Sort(documented)
	require.Equal(t, flags, documented, "the agent's flags (left) and docs/configuration.md's (right)")
}

// TestRefreshCommand: the shell form of refresh that docs/operations.md gives takes those flags.
func TestRefreshCommand(t *testing.T) {
	ops := read(t, "docs/operations.md")
	m := regexp.MustCompile("`refresh (--once[^`]*)`").FindStringSubmatch(ops)
	require.NotNil(t, m)
	bin := testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/refresh")
	out, _ := exec.Command(bin, "-h").CombinedOutput()
	for _, f := range strings.Fields(m[1]) {
		if strings.HasPrefix(f, "--") {
			require.Contains(t, string(out), "  -"+strings.TrimPrefix(f, "--"), "refresh has no %s", f)
		}
	}
}

// TestHangarCommands: docs/configuration.md lists every command of hangar and every flag of each
// (as `hangar <command> --help` prints them), and nothing that is not one.
func TestHangarCommands(t *testing.T) {
	conf := read(t, "docs/configuration.md")
	bin := testbuild.Binary(t, "github.com/hangar-ci/hangar/cmd/hangar")
	help := func(args ...string) string {
		out, err := exec.Command(bin, append(args, "--help")...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	root := help()
	commands := regexp.MustCompile(`(?m)^  ([a-z]+)\s{2,}`).FindAllStringSubmatch(root[strings.Index(root, "Available Commands:"):strings.Index(root, "Flags:")], -1)
	require.NotEmpty(t, commands, root)
	flagRe := regexp.MustCompile(`(?m)^\s+(?:-[a-z], )?--([a-z-]+)`)
	documented := map[string][]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| (\\(every\\)|`[a-z]+`) \\| `--([a-z-]+)`").FindAllStringSubmatch(conf, -1) {
		documented[strings.Trim(m[1], "`")] = append(documented[strings.Trim(m[1], "`")], m[2])
	}
	var global []string
	for _, m := range flagRe.FindAllStringSubmatch(root[strings.Index(root, "Flags:"):], -1) {
		if m[1] != "help" && m[1] != "version" {
			global = append(global, m[1])
		}
	}
	require.ElementsMatch(t, global, documented["(every)"], "hangar's global flags (left) and docs/configuration.md's (right)")
	for _, c := range commands {
		name := c[1]
		if name == "help" || name == "completion" {
			continue
		}
		require.Contains(t, conf, "| `hangar "+name, "command %s is listed", name)
		if name == "refresh" {
			continue // its flags are the action's inputs, checked by TestConfigurationTables
		}
		out := help(name)
		var flags []string
		for _, m := range flagRe.FindAllStringSubmatch(out[strings.Index(out, "Flags:"):strings.Index(out, "Global Flags:")], -1) {
			if m[1] != "help" {
				flags = append(flags, m[1])
			}
		}
		require.ElementsMatch(t, flags, documented[name], "hangar %s's flags (left) and docs/configuration.md's (right)", name)
	}
}
