package ghapi

import (
	"errors"
	"net/http"
)

// Error is an answer of GitHub's API other than success, as the client (package ghclient) returns
// it: the HTTP status, and whether it is a rate limit. Every error callers tell apart is one; any
// other error (no answer at all: the network) is not.
type Error struct {
	Status      int
	RateLimited bool
	Err         error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// status returns the HTTP status of a GitHub API error, or 0.
func status(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// IsNotFound reports a 404: the runner (or repository, or organisation) is not there.
func IsNotFound(err error) bool { return status(err) == http.StatusNotFound }

// IsBusy reports GitHub's refusal to delete a runner that is running a job (422).
func IsBusy(err error) bool { return status(err) == http.StatusUnprocessableEntity }

// IsConflict reports a 409: a runner of that name exists already.
func IsConflict(err error) bool { return status(err) == http.StatusConflict }

// IsUnauthorized reports a 401: the credential is expired, revoked or wrong.
func IsUnauthorized(err error) bool { return status(err) == http.StatusUnauthorized }

// ErrAppRefused marks a GitHub App that may not make runners in a scope: its key or token
// refused, or the installation without the permission. Waiting does not mend it; someone must.
var ErrAppRefused = errors.New("the GitHub App may not make runners here")

// IsAppRefused reports an App that may not make runners (ErrAppRefused), or GitHub refusing the
// credential or the request outright (401, or a 403 that is not a rate limit).
func IsAppRefused(err error) bool {
	if errors.Is(err, ErrAppRefused) {
		return true
	}
	code := status(err)
	return (code == http.StatusUnauthorized || code == http.StatusForbidden) && !IsRetryable(err)
}

// IsRetryable reports an answer worth asking again later: a rate limit or a server error, or no
// answer at all (a network error).
func IsRetryable(err error) bool {
	var e *Error
	if errors.As(err, &e) && e.RateLimited {
		return true
	}
	code := status(err)
	return code == 0 && err != nil || code == http.StatusTooManyRequests || code >= 500
}
