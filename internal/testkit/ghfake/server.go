package ghfake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Scope is a repository ("owner/name") or an organisation ("owner").
type Scope string

// Org returns the scope's owner.
func (s Scope) Org() string { return strings.SplitN(string(s), "/", 2)[0] }

// IsRepo reports whether the scope is a repository.
func (s Scope) IsRepo() bool { return strings.Contains(string(s), "/") }

// covers reports whether a runner of scope s may take a job of repository repo.
func (s Scope) covers(repo Scope) bool {
	if s.IsRepo() {
		return strings.EqualFold(string(s), string(repo))
	}
	return strings.EqualFold(string(s), repo.Org())
}

// Runner is one registered self-hosted runner.
type Runner struct {
	ID     int64
	Name   string
	Scope  Scope
	Labels []string
	Group  string // organisation runner group ("" for repository runners)
	Status string // online or offline
	Busy   bool
	// JIT marks a just-in-time runner (see generate-jitconfig): ephemeral, it opens one session,
	// takes one job, and the server removes it once that job is done.
	JIT        bool
	credential string
	sessions   int  // sessions opened (going online); a JIT runner may open one
	tookJob    bool // a job was handed to it; a JIT runner takes one
}

// Job is one queued job.
type Job struct {
	ID          int64
	Repo        Scope
	RunID       string // the workflow run the job belongs to (GITHUB_RUN_ID)
	Labels      []string
	Command     string
	Status      string // queued, in_progress, completed
	Conclusion  string // success, failure or cancelled
	RunnerName  string
	RunnerID    int64  // the runner that took the job (0 while queued, or when none did)
	RunnerGroup string // that runner's group (DefaultGroup for repository runners)
	Output      string
	CreatedAt   time.Time // by the server's clock, as are StartedAt and CompletedAt
	StartedAt   time.Time
	CompletedAt time.Time
	done        chan struct{}
	lastBeat    time.Time // when its runner was last heard from (wall clock)
	cancel      bool      // CancelJob asked for it while it ran
}

type token struct {
	scope   Scope
	kind    string // registration
	expires time.Time
}

// Server is the stand-in. Create it with New; it is safe for concurrent use.
type Server struct {
	mu          sync.Mutex
	srv         *httptest.Server
	admin       map[string]bool
	tokens      map[string]token
	runners     map[int64]*Runner
	groups      map[string][]string // organisation runner groups: name → repositories allowed
	repoNames   sync.Map            // repository id → owner/name, of the repositories the stand-in has named
	jobs        map[int64]*Job
	nextRunner  int64
	jobSeq      int64
	registered  int            // registrations ever made
	minted      map[string]int // tokens ever issued, by kind
	secrets     []string       // every runner token and just-in-time configuration (and its credential) ever issued
	refuseReg   bool
	refuseNames []string
	jobWaiters  chan struct{}
	tokenTTL    time.Duration
	now         func() time.Time
	perPage     int
	holds       map[string]chan struct{} // path suffix → closed when requests may go on

	requests [numKinds]atomic.Int64 // requests answered, by credential kind (see Requests)

	// The GitHub App (app.go).
	app        *appKey
	installs   map[string]*installation // by lower-case owner login
	installSeq int64
	instTokens map[string]instToken
	instTTL    time.Duration
	orgs       map[string]bool // lower-case logins known to be organisations

	// Runner groups' ids (jit.go): DefaultGroup is 1, SetGroup's are 2, 3, … in creation order.
	groupIDs map[string]int64
	groupSeq int64
	// groupsMade counts the runner groups made through the REST API (GroupsMade).
	groupsMade int

	// Jobs in progress and runner liveness (liveness.go).
	running   map[int64]*Job
	lostAfter time.Duration

	// The manifest flow and the App's pages (manifest.go).
	user       string
	knownRepos []string
	created    []CreatedApp
	codes      map[string]*manifestCode
	appInfo    *appMeta

	// Webhook deliveries (webhooks.go).
	hook         *hook
	hookRoutes   map[string]string // webhook URL → where its deliveries go (RouteHook)
	deliveries   []Delivery
	outbox       []outgoing
	paused       bool
	dropActions  map[string]bool
	dropEvery    int           // DropEvery's n
	emitted      int           // automatic deliveries since DropEvery
	attempts     int64         // delivery attempts made: the last Delivery.Num
	redelivered  int           // redeliveries asked for through the REST API
	deliveryWake chan struct{} // buffered(1): the delivery loop has work
	deliveryNews chan struct{} // closed and replaced whenever a delivery is recorded

	life context.Context // ended by Close: background work stops
	end  context.CancelFunc
	bg   sync.WaitGroup
}

// New starts a stand-in on a random loopback port that accepts the given admin tokens. Close it
// when done.
func New(adminTokens ...string) *Server {
	s := newServer(adminTokens)
	s.srv = httptest.NewServer(s.handler())
	return s
}

// NewTLS starts a stand-in that serves https, as GitHub does, with a self-signed certificate
// (see CertFile): what a client that accepts only https GitHub URLs, such as the action's steps
// inside a workflow, talks to.
func NewTLS(adminTokens ...string) *Server {
	s := newServer(adminTokens)
	s.srv = httptest.NewTLSServer(s.handler())
	return s
}

// CertFile writes the certificate of a NewTLS stand-in, PEM encoded, to path: point
// SSL_CERT_FILE at it to trust the stand-in.
func (s *Server) CertFile(path string) error {
	cert := s.srv.Certificate()
	if cert == nil {
		return errors.New("ghfake: the stand-in does not serve TLS")
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o644)
}

// Hold makes requests whose path ends with suffix wait until the returned function is called
// (or the client gives up): a test holds a step at a chosen point, for instance the steps at their
// runner listings while it plays GitHub running the workflow's other jobs.
func (s *Server) Hold(suffix string) (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.holds[suffix] = ch
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.holds[suffix] == ch { // a later Hold of the same suffix stays
				delete(s.holds, suffix)
			}
			s.mu.Unlock()
			close(ch)
		})
	}
}

// held waits while r's path is held.
func (s *Server) held(r *http.Request) {
	s.mu.Lock()
	var wait []chan struct{}
	for suffix, ch := range s.holds {
		if strings.HasSuffix(r.URL.Path, suffix) {
			wait = append(wait, ch)
		}
	}
	s.mu.Unlock()
	for _, ch := range wait {
		select {
		case <-ch:
		case <-r.Context().Done():
		}
	}
}

func newServer(adminTokens []string) *Server {
	s := &Server{
		admin: map[string]bool{}, tokens: map[string]token{}, runners: map[int64]*Runner{}, jobs: map[int64]*Job{}, groups: map[string][]string{},
		jobWaiters: make(chan struct{}), tokenTTL: time.Hour, now: time.Now, perPage: 30, holds: map[string]chan struct{}{},
		minted:   map[string]int{},
		installs: map[string]*installation{}, installSeq: firstInstallation - 1, instTokens: map[string]instToken{}, instTTL: time.Hour,
		orgs: map[string]bool{}, user: "octocat", codes: map[string]*manifestCode{}, hookRoutes: map[string]string{}, groupIDs: map[string]int64{DefaultGroup: DefaultGroupID}, groupSeq: DefaultGroupID,
		running: map[int64]*Job{}, lostAfter: 10 * time.Second,
		dropActions: map[string]bool{}, deliveryWake: make(chan struct{}, 1), deliveryNews: make(chan struct{}),
	}
	s.life, s.end = context.WithCancel(context.Background())
	for _, t := range adminTokens {
		s.admin[t] = true
	}
	s.bg.Add(2)
	go s.deliverLoop()
	go s.watchRunners()
	return s
}

// URL returns the server's base URL (no trailing slash): the REST API root and the "web" root
// that runner URLs (URL/owner/repo) are built on.
func (s *Server) URL() string { return s.srv.URL }

// HTTPClient is a client that trusts the stand-in (its certificate, when it serves https).
func (s *Server) HTTPClient() *http.Client {
	return s.srv.Client()
}

// Close stops the server, and its background work: webhook deliveries in flight are abandoned
// and queued ones never sent.
func (s *Server) Close() {
	s.end()
	s.srv.Close()
	s.bg.Wait()
}

// Handler returns the HTTP handler, for serving the stand-in on an address of one's choosing.
func (s *Server) Handler() http.Handler { return s.handler() }

// SetClock replaces the clock tokens are issued and checked by.
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

// SetPageSize sets the default page size of runner listings (GitHub's is 30).
func (s *Server) SetPageSize(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.perPage = n
}

// RefuseRegistrations makes every registration fail as if GitHub had refused the token; every
// generate-jitconfig fails with 503 meanwhile.
func (s *Server) RefuseRegistrations(refuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuseReg = refuse
}

// RefuseRunners makes registrations of runners whose name starts with prefix fail (and
// generate-jitconfig for such names, with 503).
func (s *Server) RefuseRunners(prefix string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuseNames = append(s.refuseNames, prefix)
}

// Runners returns a copy of the runners registered in scope (all scopes when empty).
func (s *Server) Runners(scope Scope) []Runner {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Runner
	for _, r := range s.runners {
		if scope == "" || strings.EqualFold(string(r.Scope), string(scope)) {
			c := *r
			c.Labels = slices.Clone(r.Labels)
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b Runner) int { return int(a.ID - b.ID) })
	return out
}

// Registrations returns how many registrations have ever succeeded.
func (s *Server) Registrations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.registered
}

// Secrets returns every runner secret the stand-in ever issued: registration tokens,
// just-in-time configurations as encoded_jit_config carries them, and the credentials inside
// them. A test looks for them where they must never be (the table, a log).
func (s *Server) Secrets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.secrets)
}

// Minted returns how many tokens of kind were ever issued: registration (runner
// tokens), installation (the App's installation tokens) or jitconfig (just-in-time runner
// configurations).
func (s *Server) Minted(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.minted[kind]
}

// AddRunner registers an offline, idle runner named name in scope directly, as a registration
// whose runner never came online (or went away) leaves it; it returns the runner's id.
func (s *Server) AddRunner(scope Scope, name string, labels ...string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextRunner++
	x := &Runner{ID: s.nextRunner, Name: name, Scope: scope, Labels: slices.Clone(labels), Status: "offline", credential: randomToken("CRED")}
	s.runners[x.ID] = x
	s.registered++
	return x.ID
}

// SetBusy marks runner id busy (or not), as a runner running a job is.
func (s *Server) SetBusy(id int64, busy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x, ok := s.runners[id]; ok {
		x.Busy = busy
	}
}

func randomToken(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + strings.ToUpper(hex.EncodeToString(b))
}

// issue mints a token of kind for scope.
func (s *Server) issue(scope Scope, kind string) (string, time.Time) {
	t := randomToken("AREG")
	exp := s.now().Add(s.tokenTTL).UTC().Truncate(time.Second)
	s.tokens[t] = token{scope: scope, kind: kind, expires: exp}
	s.minted[kind]++
	s.secrets = append(s.secrets, t)
	return t, exp
}

// check validates a runner-side token of kind for scope; it returns a GitHub-like reason.
func (s *Server) check(tok string, kind string, scope Scope) error {
	t, ok := s.tokens[tok]
	switch {
	case !ok:
		return fmt.Errorf("http response code: NotFound from 'POST %s' (invalid %s token)", scope, kind)
	case t.kind != kind:
		return fmt.Errorf("http response code: Forbidden: a %s token cannot be used for %s", t.kind, kind)
	case !s.now().Before(t.expires):
		return fmt.Errorf("http response code: NotFound: the %s token expired at %s", kind, t.expires.Format(time.RFC3339))
	case !strings.EqualFold(string(t.scope), string(scope)):
		return fmt.Errorf("http response code: NotFound: the %s token is for %s, not %s", kind, t.scope, scope)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"message": msg, "documentation_url": "https://docs.github.com/rest"})
}
