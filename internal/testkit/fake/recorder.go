package fake

import (
	"sync"

	"github.com/aws/smithy-go"
)

// recorder counts each fake's calls by operation and holds the errors injected for them.
type recorder struct {
	rmu   sync.Mutex
	calls map[string]int
	next  map[string][]error
}

// call records one call of op and returns the error injected for it, if any (oldest first).
func (r *recorder) call(op string) error {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	if r.calls == nil {
		r.calls = map[string]int{}
	}
	r.calls[op]++
	q := r.next[op]
	if len(q) == 0 {
		return nil
	}
	r.next[op] = q[1:]
	return q[0]
}

// Calls returns how many times op was called.
func (r *recorder) Calls(op string) int {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	return r.calls[op]
}

// Inject makes the next len(errs) calls of op fail with errs, in order (karpenter's NextError);
// a nil entry lets its call succeed, so Inject(op, nil, err) fails the second call.
func (r *recorder) Inject(op string, errs ...error) {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	if r.next == nil {
		r.next = map[string][]error{}
	}
	r.next[op] = append(r.next[op], errs...)
}

func (r *recorder) resetCalls() {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	r.calls, r.next = nil, nil
}

// APIError returns an error as the SDK returns an AWS API error with code, for Inject.
func APIError(code, message string) error {
	return &smithy.GenericAPIError{Code: code, Message: message}
}
