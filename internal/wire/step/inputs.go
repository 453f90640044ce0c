// Package step is what the action's two steps (cmd/provision, cmd/release) share: reading inputs
// from flags, the action (INPUT_<NAME>) or HANGAR_<NAME> variables, the workflow's GITHUB_*
// context, wiring the AWS and GitHub clients, and writing outputs and the step summary.
package step

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sethvargo/go-githubactions"

	"github.com/hangar-ci/hangar/pkg/ghapi"
)

// Inputs reads a step's inputs. A flag given on the command line wins; then the action's input
// (INPUT_<NAME>); then HANGAR_<NAME> (upper case, dashes as underscores); then the default.
type Inputs struct {
	fs   *flag.FlagSet
	gha  *githubactions.Action
	vals map[string]*string
	defs map[string]string
	set  map[string]bool
	errs []error
	// loopbackGitHub is a flag only (never INPUT_* or HANGAR_*): see DeclareContext.
	loopbackGitHub *bool
}

// NewInputs returns an input reader for command name.
func NewInputs(name string, gha *githubactions.Action) *Inputs {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	return &Inputs{fs: fs, gha: gha, vals: map[string]*string{}, defs: map[string]string{}}
}

// Declare registers an input with its default and help text.
func (in *Inputs) Declare(name, def, usage string) {
	in.vals[name] = in.fs.String(name, def, usage)
	in.defs[name] = def
}

// Parse reads the command line.
func (in *Inputs) Parse(args []string) error {
	if err := in.fs.Parse(args); err != nil {
		return err
	}
	in.set = map[string]bool{}
	in.fs.Visit(func(f *flag.Flag) { in.set[f.Name] = true })
	return nil
}

// String returns an input's value.
func (in *Inputs) String(name string) string {
	if in.set[name] {
		return strings.TrimSpace(*in.vals[name])
	}
	if v := strings.TrimSpace(in.gha.GetInput(name)); v != "" {
		return v
	}
	if v := strings.TrimSpace(os.Getenv("HANGAR_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")))); v != "" {
		return v
	}
	return in.defs[name]
}

// Int returns an integer input; a malformed value is recorded (see Err) and 0 returned.
func (in *Inputs) Int(name, accepted string) int {
	v := in.String(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		in.errs = append(in.errs, fmt.Errorf("%s: %q: want %s", name, v, accepted))
	}
	return n
}

// Duration returns a duration input ("90s", "2h"); a malformed value is recorded.
func (in *Inputs) Duration(name string) time.Duration {
	v := in.String(name)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		in.errs = append(in.errs, fmt.Errorf("%s: %q: want a duration such as 90s, 30m or 2h", name, v))
	}
	return d
}

// Err returns the malformed values met so far.
func (in *Inputs) Err() []error { return in.errs }

// Context is the part of the workflow's context a step needs, from GITHUB_* variables (each
// overridable by a flag of Inputs, for local use).
type Context struct {
	RunID      string
	RunAttempt int
	Repository string
	ServerURL  string
	APIURL     string
	// AllowLoopbackGitHub accepts plain-http server and API URLs on a loopback address: set only
	// by the command-line flag --allow-loopback-github, which the local stand-in's tests and the
	// demo pass; an action input or environment variable cannot set it.
	AllowLoopbackGitHub bool
}

// DeclareContext registers the context's flags.
func (in *Inputs) DeclareContext() {
	in.Declare("run-id", os.Getenv("GITHUB_RUN_ID"), "the workflow run id (GITHUB_RUN_ID)")
	in.Declare("run-attempt", os.Getenv("GITHUB_RUN_ATTEMPT"), "the run attempt (GITHUB_RUN_ATTEMPT)")
	in.Declare("repository", os.Getenv("GITHUB_REPOSITORY"), "owner/name (GITHUB_REPOSITORY)")
	in.Declare("server-url", envOr("GITHUB_SERVER_URL", "https://github.com"), "the GitHub server (GITHUB_SERVER_URL)")
	in.Declare("api-url", envOr("GITHUB_API_URL", "https://api.github.com"), "the GitHub API (GITHUB_API_URL)")
	in.loopbackGitHub = in.fs.Bool("allow-loopback-github", false,
		"accept a plain-http GitHub on a loopback address (for a local stand-in; only as a flag, never from INPUT_* or HANGAR_*)")
}

// Context reads the context.
func (in *Inputs) Context() Context {
	attempt := 1 // outside a workflow there is one attempt
	if in.String("run-attempt") != "" {
		attempt = in.Int("run-attempt", "a whole number (GITHUB_RUN_ATTEMPT)")
	}
	c := Context{
		RunID: in.String("run-id"), RunAttempt: attempt,
		Repository: in.String("repository"), ServerURL: in.String("server-url"), APIURL: in.String("api-url"),
		AllowLoopbackGitHub: *in.loopbackGitHub,
	}
	if err := ghapi.CheckURL(c.APIURL, c.AllowLoopbackGitHub); err != nil {
		in.errs = append(in.errs, fmt.Errorf("GITHUB_API_URL: %w", err))
	}
	return c
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
