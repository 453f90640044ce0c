package step

import (
	"fmt"
	"os"
	"strings"

	"github.com/sethvargo/go-githubactions"
)

// Output sets a step output, or prints name=value when not running in a workflow.
func Output(gha *githubactions.Action, name, value string) {
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
