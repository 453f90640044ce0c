package secrets

import (
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// exchange is one request through a recorder and its answer.
type exchange struct {
	Method, Path, Target string // Target: X-Amz-Target, for AWS JSON protocols
	Status               int
	Req, Resp            []byte
}

// recorder is a reverse proxy that records every exchange: in front of the GitHub stand-in's API
// it sees each token the stand-in issues on its way to a step; in front of DynamoDB, every write
// the steps make to the state table.
type recorder struct {
	srv *httptest.Server
	mu  sync.Mutex
	ex  []exchange
}

func newRecorder(t *testing.T, target string) *recorder {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	rec := &recorder{}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0) // a client that gave up is no news
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		tee := &teeWriter{ResponseWriter: w, status: http.StatusOK}
		rp.ServeHTTP(tee, r)
		rec.mu.Lock()
		rec.ex = append(rec.ex, exchange{Method: r.Method, Path: r.URL.Path, Target: r.Header.Get("X-Amz-Target"),
			Status: tee.status, Req: body, Resp: tee.body.Bytes()})
		rec.mu.Unlock()
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

// URL is the recorder's address.
func (r *recorder) URL() string { return r.srv.URL }

// Take returns the exchanges recorded since the last call.
func (r *recorder) Take() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.ex
	r.ex = nil
	return out
}

// teeWriter passes a response on and keeps a copy of its body.
type teeWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *teeWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *teeWriter) Write(b []byte) (int, error) {
	w.body.Write(b)
	return w.ResponseWriter.Write(b)
}

func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// issuedTokens returns the runner tokens the GitHub stand-in issued in exs (token → kind).
func issuedTokens(exs []exchange) map[string]string {
	out := map[string]string{}
	for _, e := range exs {
		kind := ""
		switch {
		case strings.HasSuffix(e.Path, "/actions/runners/registration-token"):
			kind = "registration"
		}
		if kind == "" || e.Method != http.MethodPost || e.Status != http.StatusCreated {
			continue
		}
		var tok struct {
			Token string `json:"token"`
		}
		if json.Unmarshal(e.Resp, &tok) == nil && tok.Token != "" {
			out[tok.Token] = kind
		}
	}
	return out
}
