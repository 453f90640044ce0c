package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
)

// awsProxy forwards AWS requests to an emulator and counts them by operation (the X-Amz-Target
// of JSON protocols, the Action of EC2's query protocol).
type awsProxy struct {
	ln  net.Listener
	srv *http.Server
	mu  sync.Mutex
	ops map[string]int
}

func newAWSProxy(target string) (*awsProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &awsProxy{ln: ln, ops: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := r.Header.Get("X-Amz-Target")
		if op == "" {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if v, err := url.ParseQuery(string(body)); err == nil {
				op = "EC2." + v.Get("Action")
			}
		}
		if service, action, ok := strings.Cut(op, "."); ok && !strings.HasPrefix(op, "EC2.") {
			service, _, _ = strings.Cut(service, "_") // DynamoDB_20120810 → DynamoDB
			op = service + "." + action
		}
		p.mu.Lock()
		p.ops[op]++
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *awsProxy) url() string { return "http://" + p.ln.Addr().String() }

// take returns the counts since the last take and resets them.
func (p *awsProxy) take() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.ops
	p.ops = map[string]int{}
	return out
}

func (p *awsProxy) close() { _ = p.srv.Close() }

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
