package step

import (
	"fmt"
	"html"
	"os"
	"slices"
	"strings"

	"github.com/sethvargo/go-githubactions"
)

// Output sets a step output, or prints name=value when not running in a workflow. name is one of
// the catalogue's outputs (action.yml declares each).
func Output(gha *githubactions.Action, name, value string) {
	if !slices.Contains(ProvisionOutputs, name) && !slices.Contains(RefreshOutputs, name) {
		panic("step: output " + name + " is not in the catalogue")
	}
	if os.Getenv("GITHUB_OUTPUT") == "" {
		fmt.Printf("%s=%s\n", name, value)
		return
	}
	gha.SetOutput(name, value)
}

// Summary appends markdown to the step summary when running in a workflow, and prints it
// otherwise.
func Summary(gha *githubactions.Action, markdown string) {
	if os.Getenv("GITHUB_STEP_SUMMARY") == "" {
		fmt.Fprintln(os.Stderr, markdown)
		return
	}
	gha.AddStepSummary(markdown)
}

// Details renders text in a collapsed block: a summary line, then the text as a code block whose
// fence is longer than any run of backticks in it, so the text cannot end the block early.
func Details(summary, text string) string {
	fence := "```"
	for strings.Contains(text, fence) {
		fence += "`"
	}
	return "<details><summary>" + html.EscapeString(summary) + "</summary>\n\n" + fence + "text\n" +
		strings.TrimRight(text, "\n") + "\n" + fence + "\n\n</details>\n\n"
}

// Table renders a markdown table.
func Table(header []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n|")
	for range header {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}
