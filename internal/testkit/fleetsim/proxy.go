package fleetsim

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
)

// Request is one DynamoDB request an agent made: the operation (X-Amz-Target, e.g.
// DynamoDB_20120810.UpdateItem) and its JSON body.
type Request struct {
	Target string
	Body   []byte
}

// ddbProxy forwards one instance's DynamoDB requests, counting and recording them; cut, it drops
// every connection as an unreachable endpoint would.
type ddbProxy struct {
	ln    net.Listener
	srv   *http.Server
	up    atomic.Bool
	count atomic.Int64
	mu    sync.Mutex
	log   []Request
}

func newProxy(target string) (*ddbProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &ddbProxy{ln: ln}
	p.up.Store(true)
	rp := httputil.NewSingleHostReverseProxy(u)
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.up.Load() {
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					_ = c.Close()
					return
				}
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		p.count.Add(1)
		p.mu.Lock()
		p.log = append(p.log, Request{Target: r.Header.Get("X-Amz-Target"), Body: body})
		if len(p.log) > 10000 {
			p.log = p.log[len(p.log)-10000:]
		}
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *ddbProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *ddbProxy) requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.log...)
}

func (p *ddbProxy) close() { _ = p.srv.Close() }
