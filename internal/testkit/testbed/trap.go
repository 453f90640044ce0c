package testbed

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// Trap is an HTTP server that counts every request it gets and answers none usefully: point AWS
// and GitHub endpoints at it to prove that refused input makes no request. When the test ends it
// fails the test if any request arrived.
type Trap struct {
	URL      string
	requests atomic.Int64
}

// NewTrap starts a trap for t (closed, and checked, when t ends).
func NewTrap(t testing.TB) *Trap {
	t.Helper()
	tr := &Trap{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		tr.requests.Add(1)
		w.WriteHeader(http.StatusTeapot)
	}))
	tr.URL = srv.URL
	t.Cleanup(func() {
		srv.Close()
		if n := tr.requests.Load(); n != 0 {
			t.Errorf("%d requests reached AWS or GitHub: refused input must make none", n)
		}
	})
	return tr
}
