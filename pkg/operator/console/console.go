package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/hangar-ci/hangar/pkg/operator"
)

// View is what the pages show: pkg/operator's Operator.
type View interface {
	Status(ctx context.Context, pools ...string) ([]operator.PoolStatus, error)
	Runs(ctx context.Context, w operator.Window) ([]operator.RunSummary, error)
	Instance(ctx context.Context, id string) (*operator.InstanceReport, error)
	Cost(ctx context.Context, by string, w operator.Window) ([]operator.CostRow, error)
}

// Config is the console's settings.
type Config struct {
	// Stack is the stack's name, shown on every page.
	Stack string
	// Host is the Host header the browser must send: the console's own host name (NewHostName)
	// and the port the server is bound to; requests naming any other host are refused (DNS
	// rebinding).
	Host string
	// Token is the secret the browser presents once in the address (?token=) and then as a
	// cookie of Host's name alone: at least 32 characters (NewToken).
	Token string
	// RunsLimit is the most runs the runs page draws (default 50).
	RunsLimit int
	// ReadTimeout bounds each page's reads (default 30 s).
	ReadTimeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	Log *slog.Logger
}

// Validate applies the defaults and checks the settings.
func (c *Config) Validate() error {
	if c.Stack == "" {
		return errors.New("console: Config.Stack is empty: want the stack's name")
	}
	if c.Host == "" {
		return errors.New("console: Config.Host is empty: want the address the server is bound to (127.0.0.1:PORT)")
	}
	if len(c.Token) < 32 {
		return fmt.Errorf("console: Config.Token has %d characters: want at least 32 (console.NewToken)", len(c.Token))
	}
	if c.RunsLimit <= 0 {
		c.RunsLimit = 50
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 30 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Console serves the pages. It is an http.Handler, safe for concurrent use.
type Console struct {
	cfg   Config
	view  View
	pages map[string]*template.Template
	mux   *http.ServeMux
}

// Page names: the templates under templates/.
const (
	pagePools    = "pools"
	pageRuns     = "runs"
	pageInstance = "instance"
	pageCost     = "cost"
	pageProblem  = "problem"
)

// New returns the console of view.
func New(view View, cfg Config) (*Console, error) {
	if view == nil {
		return nil, errors.New("console: no view")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, view: view, pages: map[string]*template.Template{}, mux: http.NewServeMux()}
	for _, p := range []string{pagePools, pageRuns, pageInstance, pageCost, pageProblem} {
		t, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/base.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("console: parse page %s: %w", p, err)
		}
		c.pages[p] = t
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	c.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	c.mux.HandleFunc("GET /{$}", c.poolsPage)
	c.mux.HandleFunc("GET /runs", c.runsPage)
	c.mux.HandleFunc("GET /instances/{id}", c.instancePage)
	c.mux.HandleFunc("GET /cost", c.costPage)
	c.mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		c.problem(w, r, http.StatusNotFound, fmt.Sprintf("no page at %s: the pages are /, /runs, /instances/ID and /cost", r.URL.Path))
	})
	return c, nil
}

// ServeHTTP guards every request (guard.go), then serves the page it names.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	secure(w.Header())
	if !c.admit(w, r) {
		return
	}
	c.mux.ServeHTTP(w, r)
}
