// Package layout holds the repository's import rules as a test: code that ships in a binary
// (cmd/, pkg/, internal/wire/) never imports the test world (internal/testkit/), the developer commands
// (internal/cmd/) or the checks (internal/checks/), and the use-case packages under pkg/ know nothing of GitHub Actions or
// Lambda.
package layout
