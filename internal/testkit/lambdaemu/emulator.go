package lambdaemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
)

// Function is the function to run.
type Function struct {
	// Name is the function's name; invocations of any other name get ResourceNotFoundException.
	Name string
	// Bootstrap is the function's executable (a provided.al2023 bootstrap).
	Bootstrap string
	// Env is the function's environment (its configuration's variables, credentials, endpoints).
	Env []string
	// Timeout is the function's timeout (default one minute): the deadline each invocation is
	// given, and how long a caller waits before the invocation is reported timed out.
	Timeout time.Duration
}

// Emulator runs one function. Close it when done.
type Emulator struct {
	fn      Function
	srv     *httptest.Server
	cmd     *exec.Cmd
	exited  chan struct{}
	logs    testbed.Buffer
	next    chan invocation
	seq     atomic.Int64
	mu      sync.Mutex
	results map[string]chan Result
	calls   atomic.Int64
}

type invocation struct {
	id       string
	payload  []byte
	deadline time.Time
}

// Result is one invocation's outcome: the function's response, or its error document.
type Result struct {
	Payload []byte
	Error   bool
}

// Start starts the function's bootstrap against a new Runtime API.
func Start(fn Function) (*Emulator, error) {
	if fn.Name == "" || fn.Bootstrap == "" {
		return nil, errors.New("lambdaemu: Function needs a Name and a Bootstrap")
	}
	if fn.Timeout == 0 {
		fn.Timeout = time.Minute
	}
	e := &Emulator{fn: fn, next: make(chan invocation), results: map[string]chan Result{}, exited: make(chan struct{})}
	mux := http.NewServeMux()
	e.runtimeAPI(mux)
	e.invokeAPI(mux)
	e.srv = httptest.NewServer(mux)
	e.cmd = exec.Command(fn.Bootstrap)
	e.cmd.Env = append(append([]string{}, fn.Env...),
		"AWS_LAMBDA_RUNTIME_API="+strings.TrimPrefix(e.srv.URL, "http://"),
		"AWS_LAMBDA_FUNCTION_NAME="+fn.Name, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256", "AWS_LAMBDA_FUNCTION_VERSION=$LATEST")
	e.cmd.Stdout, e.cmd.Stderr = &e.logs, &e.logs
	if err := e.cmd.Start(); err != nil {
		e.srv.Close()
		return nil, fmt.Errorf("lambdaemu: start %s: %w", fn.Bootstrap, err)
	}
	go func() { _ = e.cmd.Wait(); close(e.exited) }()
	return e, nil
}

// URL is the Lambda endpoint callers use (AWS_ENDPOINT_URL_LAMBDA).
func (e *Emulator) URL() string { return e.srv.URL }

// Logs is what the function has written (its CloudWatch log stream, in Lambda).
func (e *Emulator) Logs() string { return e.logs.String() }

// Invocations counts the invocations the function has been handed.
func (e *Emulator) Invocations() int { return int(e.calls.Load()) }

// Close stops the function and the server.
func (e *Emulator) Close() {
	_ = e.cmd.Process.Kill()
	<-e.exited
	e.srv.Close()
}

// Invoke hands the function payload and waits for its outcome, the function's timeout, or ctx.
func (e *Emulator) Invoke(ctx context.Context, payload []byte) (Result, error) {
	inv := invocation{id: "req-" + strconv.FormatInt(e.seq.Add(1), 10), payload: payload, deadline: time.Now().Add(e.fn.Timeout)}
	ch := make(chan Result, 1)
	e.mu.Lock()
	e.results[inv.id] = ch
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.results, inv.id)
		e.mu.Unlock()
	}()
	ctx, cancel := context.WithDeadline(ctx, inv.deadline)
	defer cancel()
	select {
	case e.next <- inv:
		e.calls.Add(1)
	case <-e.exited:
		return Result{}, fmt.Errorf("lambdaemu: function %s exited:\n%s", e.fn.Name, e.Logs())
	case <-ctx.Done():
		return Result{}, fmt.Errorf("lambdaemu: function %s did not ask for the next invocation: %w", e.fn.Name, ctx.Err())
	}
	select {
	case r := <-ch:
		return r, nil
	case <-e.exited:
		return Result{}, fmt.Errorf("lambdaemu: function %s exited during the invocation:\n%s", e.fn.Name, e.Logs())
	case <-ctx.Done():
		return Result{}, fmt.Errorf("lambdaemu: function %s gave no answer: %w", e.fn.Name, ctx.Err())
	}
}

// runtimeAPI serves the function: the next invocation, then its response or error.
func (e *Emulator) runtimeAPI(mux *http.ServeMux) {
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", func(w http.ResponseWriter, r *http.Request) {
		select {
		case inv := <-e.next:
			w.Header().Set("Lambda-Runtime-Aws-Request-Id", inv.id)
			w.Header().Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(inv.deadline.UnixMilli(), 10))
			w.Header().Set("Lambda-Runtime-Invoked-Function-Arn", arn(e.fn.Name))
			_, _ = w.Write(inv.payload)
		case <-r.Context().Done():
		}
	})
	reply := func(isErr bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			e.mu.Lock()
			ch, ok := e.results[r.PathValue("id")]
			e.mu.Unlock()
			if !ok {
				http.Error(w, `{"errorMessage":"unknown request id"}`, http.StatusBadRequest)
				return
			}
			ch <- Result{Payload: b, Error: isErr}
			w.WriteHeader(http.StatusAccepted)
		}
	}
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", reply(false))
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", reply(true))
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = fmt.Fprintf(&e.logs, "init error: %s\n", b)
		w.WriteHeader(http.StatusAccepted)
	})
}

// invokeAPI serves callers: Invoke, synchronous (RequestResponse) only.
func (e *Emulator) invokeAPI(mux *http.ServeMux) {
	mux.HandleFunc("POST /2015-03-31/functions/{name}/invocations", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if name != e.fn.Name && name != arn(e.fn.Name) {
			awsError(w, http.StatusNotFound, "ResourceNotFoundException", "Function not found: "+arn(name))
			return
		}
		if t := r.Header.Get("X-Amz-Invocation-Type"); t != "" && t != "RequestResponse" {
			awsError(w, http.StatusBadRequest, "InvalidParameterValueException", "this stand-in serves RequestResponse invocations only, not "+t)
			return
		}
		payload, _ := io.ReadAll(r.Body)
		if len(payload) == 0 {
			payload = []byte("{}")
		}
		res, err := e.Invoke(r.Context(), payload)
		if err != nil {
			awsError(w, http.StatusInternalServerError, "ServiceException", err.Error())
			return
		}
		w.Header().Set("X-Amz-Executed-Version", "$LATEST")
		if res.Error {
			w.Header().Set("X-Amz-Function-Error", "Unhandled")
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(res.Payload)
	})
}

func arn(name string) string {
	if strings.HasPrefix(name, "arn:") {
		return name
	}
	return "arn:aws:lambda:us-east-1:123456789012:function:" + name
}

// awsError writes an error in the REST-JSON shape Lambda uses.
func awsError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("X-Amzn-Errortype", code)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"Type": "User", "message": msg})
}
