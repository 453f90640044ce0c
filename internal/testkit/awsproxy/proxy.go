// Package awsproxy is a reverse proxy in front of an AWS API emulator that counts the requests
// passing through it by operation, tells mutating ones from reads, and injects faults on demand:
// throttling and server errors at a seeded rate, added latency, or a cut (every connection
// dropped, as an unreachable endpoint would). Point a client at it with the standard
// AWS_ENDPOINT_URL* variables. Benchmarks count with it; the reliability tests break with it.
package awsproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Faults is what the proxy does to the requests it forwards.
type Faults struct {
	// Throttle is the share (0..1) of requests answered with the service's throttling error.
	Throttle float64
	// ServerError is the share (0..1) of requests answered with HTTP 500.
	ServerError float64
	// Latency is added before every forwarded request; Jitter adds up to that much more at random.
	Latency, Jitter time.Duration
	// LatencyOf, when set, gives each operation its own latency instead of Latency (what the
	// service takes to answer it: EC2's CreateFleet about a second, a DynamoDB write a few ms).
	LatencyOf func(op string) time.Duration
	// Only limits the faults to operations for which it returns true (nil: every operation).
	Only func(op string) bool
}

// Proxy forwards requests to one emulator. Create it with New; Close it when done.
type Proxy struct {
	ln  net.Listener
	srv *http.Server
	cut atomic.Bool

	mu       sync.Mutex
	ops      map[string]int
	injected map[string]int
	faults   Faults
	rnd      *rand.Rand
	keep     int       // how many requests to record (0: none)
	recorded []Request // the last keep requests
}

// Request is one request the proxy forwarded: its operation (see Operation) and its body.
type Request struct {
	Op   string
	Body []byte
}

// New starts a proxy in front of target (an emulator's endpoint URL). seed makes the injected
// faults reproducible.
func New(target string, seed uint64) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, ops: map[string]int{}, injected: map[string]int{}, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorHandler = QuietErrors
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.cut.Load() {
			drop(w)
			return
		}
		op := Operation(r)
		p.record(op, r)
		delay, fault := p.decide(op)
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		switch fault {
		case faultThrottle:
			writeError(w, op, true)
			return
		case faultServer:
			writeError(w, op, false)
			return
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

type fault int

const (
	faultNone fault = iota
	faultThrottle
	faultServer
)

// decide counts one request and draws its fate.
func (p *Proxy) decide(op string) (time.Duration, fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ops[op]++
	f := p.faults
	if f.Only != nil && !f.Only(op) {
		return 0, faultNone
	}
	delay := f.Latency
	if f.LatencyOf != nil {
		delay = f.LatencyOf(op)
	}
	if f.Jitter > 0 {
		delay += time.Duration(p.rnd.Int64N(int64(f.Jitter)))
	}
	x := p.rnd.Float64()
	switch {
	case x < f.Throttle:
		p.injected[op]++
		return delay, faultThrottle
	case x < f.Throttle+f.ServerError:
		p.injected[op]++
		return delay, faultServer
	}
	return delay, faultNone
}

// Record keeps the last n requests from now on (with their bodies), for Recorded.
func (p *Proxy) Record(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keep = n
}

// Recorded returns the requests kept (see Record), oldest first.
func (p *Proxy) Recorded() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.recorded...)
}

func (p *Proxy) record(op string, r *http.Request) {
	p.mu.Lock()
	keep := p.keep
	p.mu.Unlock()
	if keep == 0 {
		return
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	p.mu.Lock()
	defer p.mu.Unlock()
	p.recorded = append(p.recorded, Request{Op: op, Body: body})
	if len(p.recorded) > keep {
		p.recorded = p.recorded[len(p.recorded)-keep:]
	}
}

// URL is the proxy's endpoint.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// SetFaults replaces the faults injected from now on (the zero Faults: none).
func (p *Proxy) SetFaults(f Faults) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = f
}

// Cut drops every connection while on, as an unreachable endpoint would.
func (p *Proxy) Cut(on bool) { p.cut.Store(on) }

// Take returns the requests counted by operation since the last Take, and resets the counts.
func (p *Proxy) Take() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.ops
	p.ops = map[string]int{}
	return out
}

// Counts returns the requests counted by operation since the last Take, leaving the counts.
func (p *Proxy) Counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.ops))
	for k, v := range p.ops {
		out[k] = v
	}
	return out
}

// Injected returns how many faults were injected, by operation.
func (p *Proxy) Injected() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.injected))
	for k, v := range p.injected {
		out[k] = v
	}
	return out
}

// Close stops the proxy.
func (p *Proxy) Close() { _ = p.srv.Close() }

// Operation names a request's operation as Service.Action: the X-Amz-Target of JSON protocols
// (DynamoDB_20120810.UpdateItem → DynamoDB.UpdateItem, AmazonSQS.SendMessage → SQS.SendMessage),
// the Action of EC2's query protocol (EC2.RunInstances).
func Operation(r *http.Request) string {
	op := r.Header.Get("X-Amz-Target")
	if op == "" {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if v, err := url.ParseQuery(string(body)); err == nil && v.Get("Action") != "" {
			return "EC2." + v.Get("Action")
		}
		return "unknown." + r.Method
	}
	service, action, ok := strings.Cut(op, ".")
	if !ok {
		return op
	}
	service, _, _ = strings.Cut(service, "_") // DynamoDB_20120810 → DynamoDB
	switch service {
	case "AmazonSQS":
		service = "SQS"
	case "AmazonSSM":
		service = "SSM"
	case "TrentService":
		service = "KMS"
	}
	return service + "." + action
}

// readPrefixes are the actions that change nothing.
var readPrefixes = []string{"Get", "Describe", "List", "Query", "Scan", "BatchGet", "Receive"}

// Mutating reports whether an operation (as Operation names it) may change state. Receiving from
// a queue hides messages for a while but changes nothing lasting: it counts as a read.
func Mutating(op string) bool {
	_, action, _ := strings.Cut(op, ".")
	for _, p := range readPrefixes {
		if strings.HasPrefix(action, p) {
			return false
		}
	}
	return true
}

// MutatingOps returns the mutating operations of counts, with their counts.
func MutatingOps(counts map[string]int) map[string]int {
	out := map[string]int{}
	for op, n := range counts {
		if Mutating(op) && n > 0 {
			out[op] = n
		}
	}
	return out
}

// Sum adds up counts.
func Sum(counts map[string]int) int {
	n := 0
	for _, v := range counts {
		n += v
	}
	return n
}

// writeError answers as the service would: EC2's query protocol in XML, the others in JSON.
func writeError(w http.ResponseWriter, op string, throttle bool) {
	if strings.HasPrefix(op, "EC2.") {
		code, status := "InternalError", http.StatusInternalServerError
		if throttle {
			code, status = "RequestLimitExceeded", http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>`+code+
			`</Code><Message>injected by awsproxy</Message></Error></Errors><RequestID>awsproxy</RequestID></Response>`)
		return
	}
	code, status := "InternalServerError", http.StatusInternalServerError
	if throttle {
		code, status = "ThrottlingException", http.StatusBadRequest
		if strings.HasPrefix(op, "DynamoDB.") {
			code = "ProvisionedThroughputExceededException"
		}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Query-Error", code+";Sender")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, `{"__type":"`+code+`","message":"injected by awsproxy"}`)
}

// drop closes the client's connection without an answer.
func drop(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			_ = c.Close()
			return
		}
	}
	w.WriteHeader(http.StatusServiceUnavailable)
}

// QuietErrors is a reverse proxy's error handler that says nothing of a request its client gave
// up on (a long poll ended at shutdown) and answers any other failure 502, as
// httputil.ReverseProxy does.
func QuietErrors(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) || r.Context().Err() != nil {
		return
	}
	log.Printf("proxy %s %s: %v", r.Method, r.URL.Path, err)
	w.WriteHeader(http.StatusBadGateway)
}
