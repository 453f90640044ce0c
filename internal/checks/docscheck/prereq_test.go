package docscheck_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// section returns the part of md under heading (a whole line, such as "## Try it, test it"), up
// to the next heading of any level.
func section(t *testing.T, md, heading string) string {
	t.Helper()
	i := strings.Index(md, "\n"+heading+"\n")
	require.GreaterOrEqual(t, i, 0, "no %q heading", heading)
	rest := md[i+len(heading)+2:]
	if j := strings.Index(rest, "\n#"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// listItem returns the list item of text that starts with prefix (such as "- **apt**"), its
// continuation lines joined to it.
func listItem(t *testing.T, text, prefix string) string {
	t.Helper()
	var item []string
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, prefix):
			item = []string{line}
		case item != nil && strings.HasPrefix(line, "  "):
			item = append(item, strings.TrimSpace(line))
		case item != nil:
			return strings.Join(item, " ")
		}
	}
	require.NotNil(t, item, "no list item starting %q", prefix)
	return strings.Join(item, " ")
}

// words are the names text holds: runs of letters, digits, '.', '+', '_' and '-'.
func words(text string) map[string]bool {
	out := map[string]bool{}
	for _, w := range regexp.MustCompile(`[A-Za-z0-9.+_-]+`).FindAllString(text, -1) {
		out[strings.TrimRight(w, ".")] = true
	}
	return out
}

// TestReadmePrerequisites: the README's "Try it, test it" says what make demo and make test need
// of the machine, as scripts/testbed.sh (which both run first) and the Makefile ask it: every
// package the test bed installs with apt, the users it creates, every port its emulators listen
// on, the npm packages it and make test download, and cgroup.kill, which the agents use.
func TestReadmePrerequisites(t *testing.T) {
	try := section(t, read(t, "README.md"), "## Try it, test it")
	all := words(try)
	bed := read(t, "scripts/testbed.sh")

	// apt: every package of every apt-get install, named in the README's apt item.
	apt := words(listItem(t, try, "- **apt**"))
	installs := regexp.MustCompile(`apt-get install -y -qq ([^>&|\n]+)`).FindAllStringSubmatch(bed, -1)
	require.NotEmpty(t, installs, "scripts/testbed.sh installs nothing with apt-get install -y -qq: update this test")
	var pkgs []string
	for _, m := range installs {
		for _, p := range strings.Fields(m[1]) {
			if !strings.HasPrefix(p, "-") {
				pkgs = append(pkgs, p)
			}
		}
	}
	require.NotEmpty(t, pkgs)
	for _, p := range pkgs {
		require.True(t, apt[p], "scripts/testbed.sh installs %s with apt; README's \"Try it, test it\" apt item does not name it", p)
	}

	// Users: RUNNER_USERS numbered ones and every user created by a fixed name.
	m := regexp.MustCompile(`(?m)^RUNNER_USERS=\$\{RUNNER_USERS:-([0-9]+)\}`).FindStringSubmatch(bed)
	require.NotNil(t, m, "scripts/testbed.sh sets no default RUNNER_USERS: update this test")
	numbered, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	pm := regexp.MustCompile(`name=([a-z-]+)\$i\b`).FindStringSubmatch(bed)
	require.NotNil(t, pm, "scripts/testbed.sh names no numbered runner user: update this test")
	first := fmt.Sprintf("%s%0*d", pm[1], len(m[1]), 1)
	last := fmt.Sprintf("%s%0*d", pm[1], len(m[1]), numbered)
	var fixed []string
	for _, u := range regexp.MustCompile(`useradd [^|\n]*\s"?([^\s"]+)"?\s+\|\|`).FindAllStringSubmatch(bed, -1) {
		if !strings.HasPrefix(u[1], "$") {
			fixed = append(fixed, u[1])
		}
	}
	users := listItem(t, try, fmt.Sprintf("- **%d users**", numbered+len(fixed)))
	for _, name := range append([]string{first, last, "RUNNER_USERS"}, fixed...) {
		require.True(t, words(users)[name], "README's users item does not name %s (scripts/testbed.sh creates %d numbered users and %v)", name, numbered, fixed)
	}

	// Ports: every emulator's port and the variable that moves it.
	ports := regexp.MustCompile(`(?m)^([A-Z]+_PORT)=\$\{[A-Z]+_PORT:-([0-9]+)\}`).FindAllStringSubmatch(bed, -1)
	require.NotEmpty(t, ports, "scripts/testbed.sh sets no *_PORT: update this test")
	for _, p := range ports {
		require.True(t, all[p[2]], "scripts/testbed.sh listens on port %s (%s); README's \"Try it, test it\" does not name it", p[2], p[1])
		require.True(t, all[p[1]], "README's \"Try it, test it\" does not name %s", p[1])
	}
	env := regexp.MustCompile(`127\.0\.0\.1:\$([A-Z]+_PORT)`).FindAllStringSubmatch(bed, -1)
	require.NotEmpty(t, env)
	for _, e := range env {
		require.True(t, all[e[1]], "scripts/testbed.sh's endpoints use %s; README's \"Try it, test it\" does not name it", e[1])
	}

	// npm: the packages the test bed and make test download, by name.
	var npm []string
	if d := regexp.MustCompile(`(?m)^DDB_NPM_PACKAGE=(\S+)`).FindStringSubmatch(bed); d != nil {
		npm = append(npm, d[1])
	}
	for _, i := range regexp.MustCompile(`(?m)npm install [^\n]*?\s(@?[a-z0-9/._-]+@[0-9]\S*)\s*$`).FindAllStringSubmatch(read(t, "Makefile"), -1) {
		npm = append(npm, i[1])
	}
	require.Len(t, npm, 2, "the npm packages of scripts/testbed.sh and the Makefile: update this test")
	for _, p := range npm {
		name := p[:strings.LastIndex(p, "@")]
		require.True(t, strings.Contains(try, name), "README's \"Try it, test it\" does not name the npm package %s", name)
	}

	// cgroup v2's cgroup.kill, which the agents kill their runs with.
	require.Contains(t, read(t, "pkg/instance/host/cgroup.go"), "cgroup.kill")
	require.True(t, strings.Contains(try, "`cgroup.kill`"), "README's \"Try it, test it\" does not name `cgroup.kill`")
}
