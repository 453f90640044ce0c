package designdoc_test

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/instance/agent"
	"github.com/hangar-ci/hangar/pkg/pool/offers"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
	"github.com/hangar-ci/hangar/pkg/steps/release"
)

func readDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../docs/design.md")
	require.NoError(t, err)
	return string(b)
}

// table returns the rows (cells trimmed) of the markdown table whose header starts with header.
func table(t *testing.T, doc, header string) [][]string {
	t.Helper()
	i := strings.Index(doc, "\n"+header)
	require.GreaterOrEqual(t, i, 0, "table %q not in docs/design.md", header)
	lines := strings.Split(doc[i+1:], "\n")
	var rows [][]string
	for _, l := range lines[2:] { // skip header and separator
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		rows = append(rows, cells)
	}
	require.NotEmpty(t, rows, "table %q is empty", header)
	return rows
}

var codeRe = regexp.MustCompile("`([^`]+)`")

// codes returns the `quoted` names in a cell.
func codes(cell string) []string {
	var out []string
	for _, m := range codeRe.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// jsonBlock returns the first ```json block after marker.
func jsonBlock(t *testing.T, doc, marker string) string {
	t.Helper()
	i := strings.Index(doc, marker)
	require.GreaterOrEqual(t, i, 0, "%q not in docs/design.md", marker)
	rest := doc[i:]
	start := strings.Index(rest, "```json\n")
	require.GreaterOrEqual(t, start, 0)
	rest = rest[start+len("```json\n"):]
	return rest[:strings.Index(rest, "```")]
}

func TestStateMachineMatchesDesign(t *testing.T) {
	t.Parallel()
	doc := readDoc(t)
	var documented [][2]state.State
	for _, row := range table(t, doc, "| from | to | written by |") {
		from, to := strings.Trim(row[0], "`"), strings.Trim(row[1], "`")
		if from == "—" {
			require.Equal(t, "created", to, "only created is written without a from-state")
			continue
		}
		froms := []state.State{state.State(from)}
		if from == "any non-terminal" {
			froms = state.LiveStates
		}
		for _, f := range froms {
			require.True(t, f.Valid(), "documented state %q", f)
			documented = append(documented, [2]state.State{f, state.State(to)})
		}
	}
	var code [][2]state.State
	for _, f := range state.States {
		for _, to := range state.States {
			if state.Allowed(f, to) {
				code = append(code, [2]state.State{f, to})
			}
		}
	}
	require.ElementsMatch(t, code, documented, "docs/design.md §3 and state.Allowed list the same transitions")
}

func TestSignalsMatchDesign(t *testing.T) {
	t.Parallel()
	doc := readDoc(t)
	var names []string
	for _, row := range table(t, doc, "| signal | written when |") {
		n := strings.Trim(row[0], "`")
		require.True(t, state.SignalName(n).Valid(), "documented signal %q is unknown to the code", n)
		names = append(names, n)
	}
	require.Len(t, names, 6)
}

func tags(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			out = append(out, tags(f.Type)...)
			continue
		}
		out = append(out, strings.Split(f.Tag.Get("dynamodbav"), ",")[0])
	}
	return out
}

func TestItemAttributesMatchDesign(t *testing.T) {
	t.Parallel()
	doc := readDoc(t)
	section := doc[strings.Index(doc, "### Attributes"):strings.Index(doc, "## 3. States")]
	var documented []string
	for _, header := range []string{"| attribute | type | meaning |"} {
		for {
			i := strings.Index(section, "\n"+header)
			if i < 0 {
				break
			}
			for _, row := range table(t, section, header) {
				documented = append(documented, codes(row[0])...)
			}
			section = section[i+len(header):]
		}
	}
	code := tags(reflect.TypeFor[state.Instance]())
	slices.Sort(documented)
	slices.Sort(code)
	require.Equal(t, code, documented, "docs/design.md §2 attributes and state.Instance's fields")
}

func TestExamplesParse(t *testing.T) {
	t.Parallel()
	doc := readDoc(t)
	m, err := offers.ParseMessage(jsonBlock(t, doc, "## 8. The pool message"), "linux-x64")
	require.NoError(t, err, "the example pool message")
	require.Equal(t, int64(7), m.Version)

	d, err := pooldoc.Parse([]byte(jsonBlock(t, doc, "## 9. The pool document")))
	require.NoError(t, err, "the example pool document")
	require.Equal(t, "linux-x64", d.Name)
}

// parseDefault reads "10 min", "6 h", "7 days", "1 s".
func parseDefault(t *testing.T, s string) time.Duration {
	t.Helper()
	f := strings.Fields(s)
	require.Len(t, f, 2, "default %q", s)
	n, err := strconv.Atoi(f[0])
	require.NoError(t, err)
	unit := map[string]time.Duration{"s": time.Second, "min": time.Minute, "h": time.Hour, "days": 24 * time.Hour}[f[1]]
	require.NotZero(t, unit, "unit of %q", s)
	return time.Duration(n) * unit
}

func TestTimeoutsMatchDesign(t *testing.T) {
	t.Parallel()
	doc := readDoc(t)
	code := map[string]time.Duration{
		"`created` threshold":          pooldoc.DefaultTimeouts.Created.D(),
		"`claimed` threshold":          pooldoc.DefaultTimeouts.Claimed.D(),
		"`running` threshold":          pooldoc.DefaultTimeouts.Running.D(),
		"`idle` threshold":             pooldoc.DefaultTimeouts.Idle.D(),
		"`stopped` threshold":          pooldoc.DefaultTimeouts.Stopped.D(),
		"terminated retention":         state.DefaultHistoryRetention,
		"`poolWait`":                   offers.DefaultWait,
		"message visibility":           offers.DefaultVisibility,
		"`heartbeatInterval`":          agent.DefaultHeartbeatInterval,
		"agent poll interval":          agent.DefaultPollInterval,
		"agent self-termination grace": agent.DefaultTerminateGrace,
		"registration wait":            provision.DefaultRegistrationTimeout,
		"deregistration wait":          release.DefaultDeregisterTimeout,
	}
	checked := 0
	for _, row := range table(t, doc, "| name | default | where | why |") {
		if want, ok := code[row[0]]; ok {
			require.Equal(t, want, parseDefault(t, row[1]), row[0])
			checked++
		}
	}
	require.Equal(t, len(code), checked, "every timeout the code has so far is in the table")
}

func TestAgentAttributesMatchDesign(t *testing.T) {
	t.Parallel()
	doc := readDoc(t)
	i := strings.Index(doc, "Written only by the agent")
	require.GreaterOrEqual(t, i, 0)
	var documented []string
	for _, row := range table(t, doc[i:], "| attribute | type | meaning |") {
		documented = append(documented, codes(row[0])...)
	}
	require.ElementsMatch(t, state.AgentAttributes, documented, "docs/design.md's agent attributes and state.AgentAttributes")
}
