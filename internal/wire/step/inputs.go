// Package step is what the action's steps (cmd/provision, cmd/release, and hangar refresh in
// cmd/hangar) share: reading inputs from flags, the action (INPUT_<NAME>) or HANGAR_<NAME>
// variables, the workflow's GITHUB_* context, parsing list inputs, wiring the AWS and GitHub
// clients, and writing outputs and the step summary.
package step

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sethvargo/go-githubactions"

	"github.com/hangar-ci/hangar/pkg/platform/ghurl"
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
}

// NewInputs returns an input reader for command name.
func NewInputs(name string, gha *githubactions.Action) *Inputs {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	return &Inputs{fs: fs, gha: gha, vals: map[string]*string{}, defs: map[string]string{}}
}

// Declare registers the action's inputs (see the catalogue) a step reads.
func (in *Inputs) Declare(inputs ...Input) {
	for _, x := range inputs {
		in.declare(x.Name, x.Default, x.Usage)
	}
}

// declare registers an input with its default and help text.
func (in *Inputs) declare(name, def, usage string) {
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
	v, _ := in.source(name)
	return v
}

// source returns an input's value and where it came from: the flag, INPUT_<NAME>,
// HANGAR_<NAME>, or "" for the default.
func (in *Inputs) source(name string) (value, from string) {
	if _, ok := in.vals[name]; !ok {
		panic("step: input " + name + " read but not declared") // a step reads only what it declares
	}
	if in.set[name] {
		return strings.TrimSpace(*in.vals[name]), "--" + name
	}
	if v := strings.TrimSpace(in.gha.GetInput(name)); v != "" {
		return v, "the " + name + " input"
	}
	env := "HANGAR_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	if v := strings.TrimSpace(os.Getenv(env)); v != "" {
		return v, env
	}
	return in.defs[name], ""
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
	switch {
	case err != nil:
		in.errs = append(in.errs, fmt.Errorf("%s: %q: want a duration such as 90s, 30m or 2h", name, v))
	case d <= 0:
		// Zero is never a setting: it would silently mean the default.
		in.errs = append(in.errs, fmt.Errorf("%s: %q: want a duration above zero, such as 90s, 30m or 2h (leave it empty for the default)", name, v))
	}
	return d
}

// Bool returns a true-or-false input; a malformed value is recorded and false returned.
func (in *Inputs) Bool(name string) bool {
	v := in.String(name)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		in.errs = append(in.errs, fmt.Errorf("%s: %q: want true or false", name, v))
	}
	return b
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
}

// DeclareContext registers the context's flags.
func (in *Inputs) DeclareContext() {
	in.declare("run-id", os.Getenv("GITHUB_RUN_ID"), "the workflow run id (GITHUB_RUN_ID)")
	in.declare("run-attempt", os.Getenv("GITHUB_RUN_ATTEMPT"), "the run attempt (GITHUB_RUN_ATTEMPT)")
	in.declare("repository", os.Getenv("GITHUB_REPOSITORY"), "owner/name (GITHUB_REPOSITORY)")
	in.declare("server-url", envOr("GITHUB_SERVER_URL", "https://github.com"), "the GitHub server (GITHUB_SERVER_URL)")
	in.declare("api-url", envOr("GITHUB_API_URL", "https://api.github.com"), "the GitHub API (GITHUB_API_URL)")
}

// workflowContext names each context input's workflow variable.
var workflowContext = map[string]string{
	"run-id": "GITHUB_RUN_ID", "run-attempt": "GITHUB_RUN_ATTEMPT", "repository": "GITHUB_REPOSITORY",
	"server-url": "GITHUB_SERVER_URL", "api-url": "GITHUB_API_URL",
}

// contextValue returns a context input. Inside a workflow run (GITHUB_ACTIONS=true) the run's
// identity and GitHub's URLs come only from the runner's GITHUB_* variables, which a job cannot
// change: a flag, input or HANGAR_* variable saying otherwise (a job can set HANGAR_* for later
// steps through $GITHUB_ENV) is refused.
func (in *Inputs) contextValue(name string) string {
	if os.Getenv("GITHUB_ACTIONS") != "true" {
		return in.String(name)
	}
	env := workflowContext[name]
	want := strings.TrimSpace(os.Getenv(env))
	if got, from := in.source(name); from != "" && got != want {
		in.errs = append(in.errs, fmt.Errorf("%s: %s says %q, the workflow's %s is %q: inside a workflow run it comes only from %s",
			name, from, got, env, want, env))
	}
	return want
}

// Context reads the context.
func (in *Inputs) Context() Context {
	attempt := 1 // outside a workflow there is one attempt
	if v := in.contextValue("run-attempt"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			in.errs = append(in.errs, fmt.Errorf("run-attempt: %q: want a whole number (GITHUB_RUN_ATTEMPT)", v))
		}
		attempt = n
	}
	c := Context{
		RunID: in.contextValue("run-id"), RunAttempt: attempt, Repository: in.contextValue("repository"),
		ServerURL: in.contextValue("server-url"), APIURL: in.contextValue("api-url"),
	}
	// https only; the local world's builds (-tags localworld) also take their plain-http stand-in.
	if err := ghurl.CheckURL(c.APIURL); err != nil {
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
