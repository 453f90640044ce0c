// Package ghapi is the vocabulary of the part of the GitHub REST API Hangar uses: runner
// registration tokens, just-in-time runners, self-hosted runners and where they are registered
// (a repository or an organisation), and the answers callers tell apart (Error). It links no
// GitHub client: the client is package ghclient, and those who only name runners (the pool, the
// agent) stay free of it.
package ghapi

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/names"
)

// Token is a runner registration token.
type Token struct {
	Value     string
	ExpiresAt time.Time
}

// Runner is a registered self-hosted runner.
type Runner struct {
	ID     int64
	Name   string
	Status string // online or offline
	Busy   bool
	Labels []string
}

// Scope is where runners are registered: a repository (owner/name) or an organisation.
type Scope struct {
	Owner string
	Repo  string // empty for an organisation
}

// The kinds of scope ParseScope takes.
const (
	ScopeRepo = "repo"
	ScopeOrg  = "org"
)

// ErrScopeKind is returned (wrapped) by ParseScope for a kind other than repo or org.
var ErrScopeKind = errors.New("want repo or org")

// ParseScope returns the scope of repository owner/name for kind "repo" or "org".
func ParseScope(repository, kind string) (Scope, error) {
	switch kind {
	case ScopeRepo, "", ScopeOrg:
	default:
		return Scope{}, fmt.Errorf("runner-scope %q: %w", kind, ErrScopeKind)
	}
	if err := names.ValidateRepository(repository); err != nil {
		return Scope{}, err
	}
	owner, name, _ := strings.Cut(repository, "/")
	if kind == ScopeOrg {
		return Scope{Owner: owner}, nil
	}
	return Scope{Owner: owner, Repo: name}, nil
}

// IsOrg reports whether runners of the scope belong to the organisation.
func (s Scope) IsOrg() bool { return s.Repo == "" }

// String is owner/name or owner.
func (s Scope) String() string {
	if s.Repo == "" {
		return s.Owner
	}
	return s.Owner + "/" + s.Repo
}

// RunnerURL is the URL runners of the scope register with, on the GitHub server serverURL
// (https://github.com, or an enterprise server).
func (s Scope) RunnerURL(serverURL string) string {
	return strings.TrimRight(serverURL, "/") + "/" + s.String()
}

// RepositoryGroupID is the runner group id a repository's just-in-time runners are made in:
// repositories have only the default group.
const RepositoryGroupID = 1

// JITRequest asks for one just-in-time runner.
type JITRequest struct {
	// Name is the runner's name (at most 64 characters; unique in the scope).
	Name string
	// Labels are exactly the labels the runner carries: GitHub adds none to a just-in-time runner.
	Labels []string
	// GroupID is the organisation runner group's id (RepositoryGroup); for a repository,
	// RepositoryGroupID.
	GroupID int64
	// WorkFolder is the runner's work directory, relative to its own directory ("" for _work).
	WorkFolder string
}

// JIT is a just-in-time runner: registered, offline until a runner starts with Config, and
// removed by GitHub after its one job.
type JIT struct {
	RunnerID int64
	// Config is the encoded configuration `run.sh --jitconfig` takes: a credential of the runner,
	// to be handed to one instance only.
	Config string
}

// ErrNoConfig is returned when GitHub's answer holds no configuration.
var ErrNoConfig = errors.New("GitHub returned no just-in-time configuration")

// ErrGroupNotOwn is returned (wrapped) for a runner group, named as the stack names a
// repository's group, that is open to other repositories than that one.
var ErrGroupNotOwn = errors.New("the runner group is not the repository's own")

// Delivery is one attempt GitHub made to deliver one of the App's webhook events (GET
// /app/hook/deliveries): a redelivery is a new attempt of the same event, under the same GUID.
type Delivery struct {
	ID         int64
	GUID       string // the event's X-GitHub-Delivery, the same for each attempt
	At         time.Time
	Redelivery bool
	// StatusCode is the receiver's answer; 0 when there was none (a timeout, a refused connection).
	StatusCode   int
	Event        string
	Action       string
	Installation int64
	RepositoryID int64
}

// Repository is a repository an App installation may act on.
type Repository struct {
	ID       int64
	FullName string // owner/name
	Archived bool
}

// WorkflowRun is a workflow run as the REST API lists it.
type WorkflowRun struct {
	ID        int64
	Status    string
	CreatedAt time.Time
}

// WorkflowJob is a job of a workflow run as the REST API lists it.
type WorkflowJob struct {
	ID         int64
	RunID      int64
	RunAttempt int
	Status     string // queued, in_progress, completed, waiting, …
	Labels     []string
	CreatedAt  time.Time
}

// App is a GitHub App as GET /app describes it.
type App struct {
	ID        int64
	Slug      string
	Name      string
	Owner     string // the account that owns the App's registration
	OwnerType string // User or Organization
	HTMLURL   string
	// Permissions and Events are what the App asks of each installation.
	Permissions map[string]string
	Events      []string
}

// NewApp is an App the manifest flow registered, with its credentials.
type NewApp struct {
	App
	PEM           string
	WebhookSecret string
}

// Installation is one installation of the App, as GET /app/installations lists it.
type Installation struct {
	ID        int64
	Account   string
	Suspended bool
	// AllRepositories is set when it covers every repository of its account.
	AllRepositories bool
	// Permissions are what the installation has accepted.
	Permissions map[string]string
}

// Release is one release of a repository (the runner's: actions/runner).
type Release struct {
	Version     string // the tag without its leading v
	PublishedAt time.Time
}

// HookConfig is where GitHub delivers the App's webhook, and how.
type HookConfig struct {
	URL         string
	ContentType string // json or form
	InsecureSSL bool
}
