package secrets

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// source is one place the cycle left text in.
type source struct {
	name, text string
}

// leak is a token found in a source.
type leak struct {
	source, kind, line string
}

func (l leak) String() string { return fmt.Sprintf("%s token in %s: %s", l.kind, l.source, l.line) }

// maskCommand is the workflow command a step announces a secret with, so that the runner masks
// it from then on: the one place a step's output may hold a token.
const maskCommand = "::add-mask::"

// scan returns every occurrence of a token (token → kind) in the sources. Lines of a step's
// output that are a mask command are not leaks. The lines reported have the token redacted.
func scan(sources []source, tokens map[string]string) []leak {
	var out []leak
	for _, src := range sources {
		for _, line := range strings.Split(src.text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), maskCommand) {
				continue
			}
			for _, tok := range slices.Sorted(func(yield func(string) bool) {
				for k := range tokens {
					if !yield(k) {
						return
					}
				}
			}) {
				if strings.Contains(line, tok) {
					out = append(out, leak{source: src.name, kind: tokens[tok], line: redact(line, tokens)})
				}
			}
		}
	}
	return out
}

// redact replaces every token in s with its kind, so that a failure does not print tokens.
func redact(s string, tokens map[string]string) string {
	for tok, kind := range tokens {
		s = strings.ReplaceAll(s, tok, "<"+kind+" token>")
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// checkScanner proves the scanner can fail: a token planted in a sample text is found, in the
// middle of a line and of a JSON document, and only a mask command is let through.
func checkScanner(t *testing.T) {
	tokens := map[string]string{"AREGPLANTED0123456789ABCDEF": "registration", "admin-token": "admin"}
	sample := []source{
		{"step log", "::add-mask::AREGPLANTED0123456789ABCDEF\n::add-mask::admin-token\nall good here\n"},
		{"agent log", `{"level":"INFO","msg":"config.sh --token AREGPLANTED0123456789ABCDEF --url https://github.com/octo/app"}`},
		{"queue message", `{"v":1,"note":"x admin-token y"}`},
		{"clean", "REGPLANTED0123456789 admin token admin_token"},
	}
	leaks := scan(sample, tokens)
	require.Len(t, leaks, 2, "%v", leaks)
	require.Equal(t, "agent log", leaks[0].source)
	require.Equal(t, "registration", leaks[0].kind)
	require.NotContains(t, leaks[0].line, "AREGPLANTED", "a reported line has its token redacted")
	require.Equal(t, "queue message", leaks[1].source)
	require.Equal(t, "admin", leaks[1].kind)
}
